"""The masked softmax: scores → attention weights.

    α_ij = exp(e_ij) / Σ_j' exp(e_ij')     over the keys j that query i may attend

Defined numerics:

* Stable for large scores (the maximum is subtracted; scores of 1e4 are fine).
* Runs in float32 for float16/bfloat16 scores; the weights come back in the
  scores' dtype.
* **A fully masked row** (a query that may attend no key) gets **zero
  weights**, not NaN, and its gradients are zero. Its scores are replaced by
  zeros (whatever they were: even inf from an overflowing product), so it is
  computed as a uniform row and then zeroed, and no ``exp(-inf) / 0`` or
  ``inf - inf`` ever reaches autograd.
* The input is never written to.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..masks import allowed


def _row_fix(mask: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the rows that are fully masked, what a forbidden score becomes: 0 in those rows, −∞ elsewhere).

    Both are small, (..., q, 1) when ``dim`` is the last. Tensor algebra only (no host read): the
    rows are replaced and zeroed again whether or not any is fully masked, so it compiles without a
    graph break.
    """
    dead = ~allowed(mask).any(dim=dim, keepdim=True)  # small when the mask broadcasts
    return dead, torch.zeros((), device=mask.device).masked_fill(~dead, float("-inf"))


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` where ``mask`` allows.

    scores: (..., q, k).  mask: bool (True = may attend) or float (additive
    bias), broadcastable to ``scores``.  Returns weights of the same shape;
    rows sum to 1, or to 0 where the mask allows no key.
    """
    _checks.tensor("scores", scores, 1)
    _checks.floating(("scores",), (scores,))
    if mask is not None:
        _checks.mask(mask, scores.shape, scores.dtype)
    return _softmax(scores, mask, dim, inplace=False)


def _softmax(
    scores: torch.Tensor, mask: torch.Tensor | None, dim: int, inplace: bool, zero_dead: bool = True
) -> torch.Tensor:
    """The arithmetic of ``masked_softmax`` (mask already checked).

    ``zero_dead=False`` leaves fully masked rows uniform (the caller zeroes what it
    derives from them: the core zeroes those context rows, which also zeroes their
    gradient, and zeroes the weights it returns), saving a pass over (..., q, k).
    ``inplace=True`` lets it overwrite ``scores``: only for a tensor the caller
    made itself and for which no gradient is needed (the reference path of
    ``attention`` under ``torch.no_grad``); it saves two allocations of the
    (..., q, k) tensor.
    """
    half = scores.dtype in (torch.float16, torch.bfloat16)
    x = scores.float() if half else scores
    inplace = inplace or half  # the float32 copy is ours either way
    inplace = inplace and not (torch.is_grad_enabled() and x.requires_grad)
    dead = None
    if mask is not None:
        dead, fill = _row_fix(mask, dim)
        if mask.dtype == torch.bool:  # one pass: e_ij where allowed, else −∞ (0 in a fully masked row)
            fill = fill.to(x.dtype)
            x = torch.where(mask, x, fill, out=x) if inplace else torch.where(mask, x, fill)
        else:  # the bias added, then a fully masked row (all −∞) replaced by zeros
            x = x.add_(mask.to(x.dtype)) if inplace else x + mask.to(x.dtype)
            x = x.masked_fill_(dead, 0.0)  # (a fresh tensor here, or the caller's to overwrite)
    weights = torch.softmax(x, dim=dim, out=x) if inplace else torch.softmax(x, dim=dim)
    if dead is not None and zero_dead:
        weights = weights.masked_fill_(dead, 0.0) if inplace else weights.masked_fill(dead, 0.0)
    return weights.to(scores.dtype)


__all__ = ["masked_softmax"]
