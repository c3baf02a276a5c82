"""A row-wise map (a projection, a per-token norm) that keeps non-finite rows out of its backward.

The core's non-finite rule (``attnlab.functional.attention``) zeroes a NaN or inf key *after* it
was computed: its gradient there is zero. But a key made by a projection, k_j = W h_j, sends to
W the gradient Σ_j ∂k_j ⊗ h_j, and 0 · NaN = NaN: a NaN token h_j at a masked position would
still make W's gradient NaN. ``map_finite_rows`` runs the map on the inputs with their
non-finite rows zeroed (the core's ``zero_nonfinite_entries``, gradient zero there) and puts
NaN back into those rows of the result, so the core still sees them and applies its rule (a
row that may attend one is NaN; one it may not attend influences nothing, W's gradient included).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .attention import nonfinite_rows, zero_nonfinite_entries


def map_finite_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for a row-wise ``fn`` (..., n, d) → (..., n, d'), the rows of x holding a NaN or ±inf
    kept out of ``fn`` and its backward: they come out all NaN, and ``fn``'s parameters and x get
    finite gradients (zero from those rows)."""
    bad = nonfinite_rows(x).unsqueeze(-1)  # (..., n, 1)
    nan = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
    return torch.where(bad, nan, fn(zero_nonfinite_entries(x)))


__all__ = ["map_finite_rows"]
