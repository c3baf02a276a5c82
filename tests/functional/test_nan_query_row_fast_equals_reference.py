"""A query row holding NaN gives a NaN output row on the fast path, as on the weights (reference) path.

The contract: a non-finite query row's output is NaN, and its NaN reaches no other row. The
reference path computes NaN scores for that row, a NaN softmax and a NaN output. On the CPU SDPA's
flash kernel reads a row whose running maximum is NaN as a row with no key and writes zeros, so
without a mask the fast path looks at the query first (one read) and sends a non-finite one to the
reference path. The rows beside it agree on both paths.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnlab


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=dtype) for n in (3, 5, 5))  # (b, h, q|k, d)
    q[0, 1, 1, 2] = math.nan  # one entry of head 1's second query
    return q, k, v


def _rows_by_hand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √d) v row by row in float64, written here: (b, h, q, d)."""
    out = torch.empty(q.shape, dtype=torch.float64)
    for h in range(q.shape[1]):
        for i in range(q.shape[2]):
            e = [float(q[0, h, i].double() @ k[0, h, j].double()) / 2.0 for j in range(k.shape[2])]  # √4 = 2
            top = max(e) if not any(math.isnan(x) for x in e) else math.nan
            w = [math.exp(x - top) for x in e]
            out[0, h, i] = sum(wj / sum(w) * v[0, h, j].double() for j, wj in enumerate(w))
    return out


def test_the_reference_path_gives_nan_for_the_nan_query_row_only() -> None:
    q, k, v = _inputs(torch.float32)
    ref, _ = attnlab.attention(q, k, v, need_weights=True)
    by_hand = _rows_by_hand(q, k, v)
    assert torch.isnan(ref[0, 1, 1]).all()
    ok = ~torch.isnan(by_hand)
    torch.testing.assert_close(ref.double()[ok], by_hand[ok], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_nan_query_row_is_nan_on_the_fast_path_too(dtype: torch.dtype) -> None:
    q, k, v = _inputs(dtype)
    fast, _ = attnlab.attention(q, k, v)
    ref, _ = attnlab.attention(q, k, v, need_weights=True)
    assert torch.isnan(ref[0, 1, 1]).all()
    torch.testing.assert_close(fast, ref, equal_nan=True)
