"""The cases: each builds float64 inputs and a mask (attnlab's polarity) for a shape (b, h, q, k, d).

``check`` runs each at its largest shape first and, when a rule breaks, again at the smaller shapes of
``LADDER`` to report the smallest input that breaks the same rule. The rules live in ``rules.judge``.

The largest shape is the size real kernels tile at: 130 queries and 257 keys (two 128-wide tiles and
a ragged end; 16, 32 and 64-wide tiles end ragged too), head size 128, two batch elements and two
heads. One input of that size per case keeps ``check`` to seconds; the next shape down (17 keys,
head size 8) is where a failure found at the largest is usually shown smaller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# From the smallest input to the one run first: (b, h, q, k, d).
LADDER = [(1, 1, 1, 2, 1), (1, 1, 2, 2, 2), (1, 1, 2, 3, 2), (2, 1, 3, 3, 2), (2, 2, 4, 5, 3), (2, 2, 9, 17, 8),
          (2, 2, 130, 257, 128)]


@dataclass
class Setup:
    """One input of a case: q, k, v (b, h, n, d) in float64; ``allow`` True = may attend."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    allow: torch.Tensor | None
    causal: bool = False  # True: causal with the alignment the caller declares
    strided: bool = False  # q, k, v as non-contiguous views (b, n, h, d).transpose(1, 2)


def _qkv(b, h, n, m, d, g):
    return tuple(torch.randn(b, h, length, d, generator=g, dtype=torch.float64) for length in (n, m, m))


def _key_mask(b, m, g):
    """(b, 1, 1, k): the odd keys are masked (so both kinds exist whenever k ≥ 2)."""
    keep = torch.arange(m) % 2 == 0
    return keep.expand(b, m).reshape(b, 1, 1, m).clone()


def values(shape, g, dense):
    b, h, n, m, d = shape
    q, k, v = _qkv(b, h, n, m, d, g)
    if dense:
        allow = torch.rand(b, h, n, m, generator=g) < 0.7
        allow[..., torch.arange(n), torch.arange(n) % m] = True  # no fully masked row here
    else:
        allow = torch.rand(b, 1, 1, m, generator=g) < 0.7
        allow[..., 0] = True
    return Setup(q, k, v, allow)


def broadcast_mask(shape, g, dense):
    s = values(shape, g, dense)
    n, m = shape[2:4]
    s.allow = torch.rand(n, m, generator=g) < 0.7  # (q, k): the same for every batch element and head
    s.allow[torch.arange(n), torch.arange(n) % m] = True
    return s


def non_contiguous(shape, g, dense):
    s = values(shape, g, dense)
    s.strided = True
    return s


def masked_nan_value(shape, g, dense):
    s = values(shape, g, False)
    s.allow = _key_mask(shape[0], shape[3], g)
    s.v[~s.allow[:, :, 0, :].expand_as(s.v[..., 0])] = torch.nan
    return s


def masked_inf_key(shape, g, dense):
    s = masked_nan_value(shape, g, dense)
    s.v = torch.randn(s.v.shape, generator=g, dtype=torch.float64)
    s.k[~s.allow[:, :, 0, :].expand_as(s.k[..., 0])] = torch.inf
    return s


def fully_masked_row(shape, g, dense):
    s = values(shape, g, False)
    s.allow = torch.ones_like(s.allow)
    s.allow[0] = False  # every query of the first batch element
    return s


def mask_polarity(shape, g, dense):
    s = values(shape, g, False)
    s.allow = torch.ones_like(s.allow)
    s.allow[..., 0] = False  # one key forbidden: the output must not depend on it
    return s


def causal(shape, g, dense):
    b, h, n, _, d = shape
    q, k, v = _qkv(b, h, max(n, 2), max(n, 2), d, g)
    k[..., -1, :] = torch.nan  # the last key: only the last query may see it
    v[..., -1, :] = torch.nan
    return Setup(q, k, v, None, causal=True)


def causal_alignment(shape, g, dense):
    b, h, _, m, d = shape
    q, k, v = _qkv(b, h, max(m - 1, 1), max(m, 2), d, g)  # q < k: the two alignments differ
    return Setup(q, k, v, None, causal=True)


def causal_more_queries(shape, g, dense):
    b, h, n, m, d = shape
    q, k, v = _qkv(b, h, max(n, m) + 1, min(n, m), d, g)  # q > k: bottom-right's first rows see no key
    return Setup(q, k, v, None, causal=True)


def _plant_unseen(s: Setup, allow: torch.Tensor) -> Setup:
    """NaN in the keys and values that no row of their (batch element, head) may attend."""
    b, h = s.q.shape[:2]
    unseen = ~allow.expand(b, h, *allow.shape[-2:]).any(-2)  # (b, h, k)
    s.k[unseen] = torch.nan
    s.v[unseen] = torch.nan
    return s


def local_window(shape, g, dense):
    b, h, n, m, d = shape
    s = Setup(*_qkv(b, h, n, m, d, g), None)
    width = 1 + m // 16
    s.allow = (torch.arange(n)[:, None] - torch.arange(m)).abs() < width  # (q, k): keys within the window
    return _plant_unseen(s, s.allow)


def random_row_masks(shape, g, dense):
    b, h, n, m, d = shape
    s = Setup(*_qkv(b, h, n, m, d, g), torch.rand(b, h, n, m, generator=g) < 0.3)
    if n > 1:
        s.allow[..., 0, :] = False  # the first row of every head sees nothing
    if m > 1:
        s.allow[..., -1] = False  # and no row sees the last key
    return _plant_unseen(s, s.allow)


def _empty(b, n, m):
    def build(shape, g, dense):
        q, k, v = _qkv(b, 2, n, m, 3, g)
        return Setup(q, k, v, torch.ones(b, 1, 1, m, dtype=torch.bool))
    return build


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable  # (shape, generator, dense: bool) -> Setup
    ladder: bool = True  # shrink along LADDER; False: one fixed input
    twice: bool = False  # call the function twice on the same input


CASES = [
    Case("values", values),
    Case("deterministic", values, twice=True),
    Case("broadcast mask (q, k)", broadcast_mask),
    Case("non-contiguous inputs", non_contiguous),
    Case("masked NaN value", masked_nan_value),
    Case("masked inf key", masked_inf_key),
    Case("fully masked row", fully_masked_row),
    Case("mask polarity", mask_polarity),
    Case("causal", causal),
    Case("causal alignment (q < k)", causal_alignment),
    Case("causal alignment (q > k)", causal_more_queries),
    Case("local window", local_window),
    Case("random row masks", random_row_masks),
    Case("empty keys (k = 0)", _empty(2, 3, 0), ladder=False),
    Case("empty batch (b = 0)", _empty(0, 3, 4), ladder=False),
    Case("empty queries (q = 0)", _empty(2, 0, 4), ladder=False),
]

__all__ = ["CASES", "LADDER", "Case", "Setup"]
