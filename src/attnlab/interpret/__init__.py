"""Interpretability on top of attention weights: rollout, flow, gradient rollout, head importance and ablation.

Reads weights and traces only (it may run a model from ``attnlab.models`` to collect them);
nothing in the library imports it.
"""

from .heads import ablation_curve, attention_modules, gated_loss, head_importance, plot_ablation
from .maxflow import layered_max_flows, max_flow
from .rollout import FUSIONS, crop, flow, grad_rollout, layer_matrices, rollout

__all__ = ["rollout", "flow", "grad_rollout", "layer_matrices", "crop", "FUSIONS", "max_flow", "layered_max_flows",
           "head_importance", "ablation_curve", "gated_loss", "attention_modules", "plot_ablation"]
