"""Squeeze-and-excitation as a pure function.

Hu et al. 2018, "Squeeze-and-Excitation Networks", https://arxiv.org/abs/1709.01507.

    s = σ(W_2 δ(W_1 AvgPool(F) + b_1) + b_2),  F' = F ⊗ s      (average pool only)

| paper | argument |
|-------|----------|
| W_1 (C/r × C), b_1 | ``w1``, ``b1`` |
| W_2 (C × C/r), b_2 | ``w2``, ``b2`` |

The feature map is (b, C, H, W); the hidden width is ``reduced_channels(C, r)``
(``attnlab.functional.channel``). Returns ``(gated map, s)`` and records its steps
while a trace is active.
"""

from __future__ import annotations

import torch

from ..trace import record
from .channel import _mlp_gate_inputs, bottleneck_mlp, channel_gate, gate, mean_pool


def se(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Squeeze-and-excitation. x (b, C, H, W), w1 (C/r, C), w2 (C, C/r) → (F', s (b, C, 1, 1))."""
    _mlp_gate_inputs(x, w1, b1, w2, b2)
    z = mean_pool(x)  # (b, C); zeros for an empty image
    record("squeeze", "z = AvgPool(F)", z, latex=r"z = F_{sq}(F) = \mathrm{AvgPool}(F)")
    logits = bottleneck_mlp(z, w1, b1, w2, b2)  # (b, C)
    record("mlp", "W_2 δ(W_1 z)", logits, latex=r"W_2\,\delta(W_1 z)")
    s_ = channel_gate(logits)  # (b, C, 1, 1)
    record("weights", "s = σ(W_2 δ(W_1 z))", s_, latex=r"s = \sigma(W_2\,\delta(W_1 z))")
    out = gate(x, s_)
    record("output", "F' = F ⊗ s", out, latex=r"F' = F \otimes s")
    return out, s_


__all__ = ["se"]
