"""A classifier as a task of the one loop ``train.fit.fit``: the experiments' small models.

    loss = −(1/b) Σ_i log p(y_i | x_i)        cross-entropy over the batch's b items

``ClassifierTask`` trains a model on the batches that ``draw(step)`` returns, ``(inputs, labels)``
with ``inputs`` a tuple of tensors: the logits are ``logits(net, *inputs)`` (by default
``net(*inputs)``), the loss their cross-entropy against ``labels``, summed with its count (the loop
divides by the count: the gradient is that of the batch's mean). Adam at ``lr``, with
``one_cycle=True`` under a one-cycle schedule over all the steps (stepped after every update), the
gradient's norm clipped at ``clip`` (0: not clipped). No evaluation and no checkpoint: the
experiments (``experiments.vision``, ``experiments.distance``, ``experiments.recommendation``)
measure the trained model themselves. ``train_classifier`` runs it and returns the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .fit import FitConfig, Step, fit
from .runtime import Runtime

Batch = tuple[tuple[torch.Tensor, ...], torch.Tensor]  # (inputs, labels (b,))


def _call(net: torch.nn.Module, *inputs: torch.Tensor) -> torch.Tensor:
    return net(*inputs)


class ClassifierTask(Step):
    """``model`` trained by ``fit`` on ``draw(step)``'s batches for ``steps`` steps (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, draw: Callable[[int], Batch], *, steps: int, lr: float,
                 logits: Callable[..., torch.Tensor] = _call, one_cycle: bool = False, clip: float = 0.0,
                 desc: str = "train"):
        self.model, self.draw, self.logits = model, draw, logits
        self.steps, self.lr, self.one_cycle, self.clip, self.desc = steps, lr, one_cycle, clip, desc
        self.sched: Any = None

    def optimizer(self) -> torch.optim.Optimizer:
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        if self.one_cycle:
            self.sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=self.steps)
        return opt

    def batch(self, step: int, rt: Runtime) -> tuple[Batch, bool]:
        inputs, labels = self.draw(step)
        return (rt.to(*inputs), *rt.to(labels)), True

    def loss_sum(self, net: torch.nn.Module, batch: Batch) -> tuple[torch.Tensor, int]:
        inputs, labels = batch
        return F.cross_entropy(self.logits(net, *inputs), labels, reduction="sum"), len(labels)

    def after_step(self, step: int) -> None:
        if self.sched is not None:
            self.sched.step()

    def fit_config(self) -> FitConfig:
        return FitConfig(self.steps, clip=self.clip, desc=self.desc)


def train_classifier(task: ClassifierTask, runtime: Runtime | None = None) -> torch.nn.Module:
    """Run ``task`` through ``fit`` (no checkpoint, no lines); its model (still in training mode)."""
    fit(task, task.fit_config(), runtime)
    return task.model


__all__ = ["ClassifierTask", "train_classifier"]
