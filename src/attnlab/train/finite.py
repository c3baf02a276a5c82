"""Non-finite training steps: watched on the device, read where the loop already reads.

A step whose gradients hold a NaN or an infinity (a diverged run: too high a learning
rate, a poisoned setting) must neither go unnoticed nor reach a checkpoint. ``FiniteGuard``
stands in for the optimizer in ``Runtime.step``: before each update it checks the gradients
with tensor operations only (no host synchronisation on the hot path) and counts the bad
steps in a tensor; the training loops read that count where they already read from the
device (a log line, a validation, a checkpoint), so a non-finite model is never saved:

* ``stop`` (the default): the run stops with ``NonFiniteError`` (one line on the command
  line) at the next such read; the last checkpoint written stays as it was;
* ``skip``: the step's update is dropped (weights and optimizer moments are put back with
  ``torch.where``, on the device) and the run goes on; ``metrics.jsonl`` records the number
  of steps skipped so far (``"skipped"``). It costs a copy of the weights and the
  optimizer's state per step. A state tensor that PyTorch keeps on another device than the
  flag (Adam's step count stays on the CPU for GPU parameters) is left counted.

Before every checkpoint ``check_weights`` reads whether the weights are finite, and each
validation loss goes through ``check_loss``, whatever the mode: a model that diverged without
a non-finite gradient (or whose bad steps were all skipped) is not saved either.
"""

from __future__ import annotations

import math

import torch

ON_NONFINITE = ("stop", "skip")


class NonFiniteError(ValueError):
    """A training run went non-finite; its last checkpoint was left as it was."""


HINT = "lower --lr (or another setting), or pass --on-nonfinite skip to drop such steps"


def _step_unless(opt: torch.optim.Optimizer, ok: torch.Tensor) -> None:
    """``opt.step()``, then put every parameter and state tensor back where ``ok`` is False."""
    params = [p for g in opt.param_groups for p in g["params"]]
    before = [p.detach().clone() for p in params]
    state = {id(p): {k: v.clone() for k, v in opt.state[p].items() if isinstance(v, torch.Tensor)}
             for p in params if p in opt.state}
    opt.step()
    with torch.no_grad():
        for p, old in zip(params, before):
            p.copy_(torch.where(ok, p, old))
        for p in params:
            for k, v in opt.state.get(p, {}).items():
                if isinstance(v, torch.Tensor) and v.device == ok.device:
                    old = state.get(id(p), {}).get(k)  # a state the step created starts from zeros
                    v.copy_(torch.where(ok, v, torch.zeros_like(v) if old is None else old))


def check_mode(mode: object) -> str:
    """``mode`` if it is one of ``ON_NONFINITE``, else a ValueError saying which are."""
    if mode not in ON_NONFINITE:
        raise ValueError(f"on_nonfinite must be one of {', '.join(ON_NONFINITE)}; got {mode!r}")
    return mode


class FiniteGuard:
    """The optimizer as ``Runtime.step`` sees it (``zero_grad``, ``step``), with the gradients
    checked first. ``first_step``: the step count so far (a resumed run's)."""

    def __init__(self, opt: torch.optim.Optimizer, mode: str = "stop", *, first_step: int = 0):
        self.opt, self.mode, self.count = opt, check_mode(mode), first_step
        device = next((p.device for g in opt.param_groups for p in g["params"]), torch.device("cpu"))
        self.ok = torch.ones((), dtype=torch.bool, device=device)  # the last step's verdict
        self.bad = torch.zeros((), dtype=torch.long, device=device)  # bad steps since the last read
        self.first = torch.full((), -1, dtype=torch.long, device=device)  # the first bad step (1-based)
        self.skipped = 0  # bad steps dropped so far (skip mode; updated at each read)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.count += 1
        grads = [p.grad for g in self.opt.param_groups for p in g["params"] if p.grad is not None]
        ok = torch.stack([g.isfinite().all() for g in grads]).all() if grads else self.ok.new_ones(())
        self.ok = ok
        self.bad += ~ok
        here = torch.full((), self.count, dtype=torch.long, device=ok.device)
        self.first = torch.where(~ok & (self.first < 0), here, self.first)
        if self.mode == "skip":
            _step_unless(self.opt, ok)
        else:
            self.opt.step()

    def keep(self, new: torch.Tensor, old: torch.Tensor | float) -> torch.Tensor:
        """``new`` where the last step was finite, else ``old`` (a loss sum that skips a dropped step)."""
        return torch.where(self.ok, new, old)

    def read(self) -> int:
        """Read the bad steps since the last read (one host read: call it where the loop reads anyway).
        In ``stop`` mode any raises ``NonFiniteError``; returns the steps skipped so far."""
        bad, first = (int(v) for v in torch.stack([self.bad, self.first]).tolist())
        self.bad.zero_()
        if bad and self.mode == "stop":
            raise NonFiniteError(f"training stopped: the gradients became non-finite (NaN or infinite) at step {first}; "
                                 f"nothing was saved after it (the last checkpoint is left as it was): {HINT}")
        self.skipped += bad
        return self.skipped

    def check_loss(self, value: float, what: str = "the validation loss") -> None:
        """Raise ``NonFiniteError`` when a loss already read (a validation) is NaN or infinite: the
        model diverged even if every step's gradients were finite (or skipped)."""
        if not math.isfinite(value):
            raise NonFiniteError(f"training stopped at step {self.count}: {what} is {value} (the model diverged); "
                                 f"nothing was saved after it (the last checkpoint is left as it was): {HINT}")

    def check_weights(self, model: torch.nn.Module) -> None:
        """Raise ``NonFiniteError`` when a weight is NaN or infinite (call it before saving)."""
        self.read()
        params = list(model.parameters())
        if params and not bool(torch.stack([p.detach().isfinite().all() for p in params]).all()):
            raise NonFiniteError(f"training stopped at step {self.count}: the weights became non-finite (NaN or "
                                 f"infinite) and were not saved (the last checkpoint is left as it was): {HINT}")


__all__ = ["ON_NONFINITE", "FiniteGuard", "NonFiniteError", "check_mode"]
