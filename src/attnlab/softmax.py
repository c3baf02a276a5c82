"""The masked softmax: scores → attention weights.

    α_ij = exp(e_ij) / Σ_j' exp(e_ij')     over the keys j that query i may attend

Defined numerics:

* Stable for large scores (the maximum is subtracted; scores of 1e4 are fine).
* Runs in float32 for float16/bfloat16 scores; the weights come back in the
  scores' dtype.
* **A fully masked row** (a query that may attend no key) gets **zero
  weights**, not NaN, and its gradients are zero. It is computed as a uniform
  row and then zeroed, so no ``exp(-inf) / 0`` ever reaches autograd.
* The input is never written to.
"""

from __future__ import annotations

import torch

from . import _checks
from .masks import allowed


def _row_fix(mask: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(mask with fully masked rows opened up, rows that are fully masked or None)."""
    ok = allowed(mask).any(dim=dim, keepdim=True)  # small when the mask broadcasts
    if not _checks.tracing() and bool(ok.all()):
        return mask, None
    dead = ~ok
    if mask.dtype == torch.bool:
        return mask | dead, dead
    return mask.masked_fill(dead, 0.0), dead


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` where ``mask`` allows.

    scores: (..., q, k).  mask: bool (True = may attend) or float (additive
    bias), broadcastable to ``scores``.  Returns weights of the same shape;
    rows sum to 1, or to 0 where the mask allows no key.
    """
    _checks.tensor("scores", scores, 1)
    x = scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores
    dead = None
    if mask is not None:
        _checks.mask(mask, scores.shape)
        mask, dead = _row_fix(mask, dim)
        if mask.dtype == torch.bool:
            x = x.masked_fill(~mask, float("-inf"))
        else:
            x = x + mask.to(x.dtype)
    weights = torch.softmax(x, dim=dim)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    return weights.to(scores.dtype)


__all__ = ["masked_softmax"]
