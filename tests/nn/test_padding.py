"""attnlab.nn.padding: padded queries get zero rows (their mask columns after a cache), other masks
are left alone, and ``zero_padded`` zeroes padded positions; values written by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab import masks
from attnlab.nn.padding import padded_queries, zero_padded


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- padding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("four_d", [False, True])
def test_padded_queries_zeroes_padded_rows(four_d):
    x = t(2, 3, 2)
    x[1, 2] = float("nan")
    pad = torch.tensor([[True, False, True], [True, True, False]])
    out, got = padded_queries(x, *masks.score_mask(pad[:, None, None, :] if four_d else pad, 2, 3, 3))
    np.testing.assert_array_equal(out.numpy(), np.where(pad.numpy()[..., None], np.nan_to_num(x.numpy()), 0.0))
    assert torch.equal(got, pad) and got.shape == (2, 3)


def test_padded_queries_keeps_the_dtype_even_of_integers():
    x = torch.arange(6).view(1, 3, 2)
    out, _ = padded_queries(x, *masks.score_mask(torch.tensor([[True, False, True]]), 1, 3, 3))
    assert out.dtype == torch.int64 and out.tolist() == [[[0, 1], [0, 0], [4, 5]]]
    h = t(1, 2, 2).half()
    assert padded_queries(h, *masks.score_mask(torch.tensor([[False, True]]), 1, 2, 2))[0].dtype == torch.float16


def test_padded_queries_after_a_cache_are_the_last_columns_of_the_padding_mask():
    x = t(1, 2, 2)
    m = torch.tensor([[False, True, True, False]])[:, None, None, :]  # (b, 1, 1, k): 2 cached keys, then x's 2
    out, pad = padded_queries(x, m, True)
    assert pad.tolist() == [[True, False]]
    np.testing.assert_array_equal(out.numpy(), np.stack([x.numpy()[0, 0], np.zeros(2)])[None])


@pytest.mark.parametrize("mask", [
    None,
    torch.zeros(2, 3, dtype=torch.float64),  # a float bias is no padding mask
    torch.ones(3, 3, dtype=torch.bool),  # another b: a (q, k) mask
    torch.ones(2, 1, 3, 3, dtype=torch.bool),  # a (b, 1, q, k) mask
    torch.ones(2, 3, 1, 1, dtype=torch.bool),
    torch.ones(2, 1, 3, dtype=torch.bool),
])
def test_padded_queries_leaves_anything_else_alone(mask):
    x = t(2, 3, 2)
    out, pad = padded_queries(x, *masks.score_mask(mask, 2, 3, 3))
    assert out is x and pad is None


def test_padded_queries_only_for_a_padding_mask():
    x = t(2, 3, 2)
    out, pad = padded_queries(x, torch.ones(2, 1, 1, 3, dtype=torch.bool), False)
    assert out is x and pad is None


def test_padded_queries_needs_a_3d_input():
    x = t(2, 3)
    out, pad = padded_queries(x, torch.ones(2, 1, 1, 3, dtype=torch.bool), True)
    assert out is x and pad is None


def test_zero_padded():
    out, w = t(2, 3, 2), t(2, 4, 3, 5, seed=1)
    assert zero_padded(out, w, None) == (out, w)
    pad = torch.tensor([[True, False, True], [False, True, True]])
    o2, w2 = zero_padded(out, w, pad)
    np.testing.assert_array_equal(o2.numpy(), np.where(pad.numpy()[..., None], out.numpy(), 0.0))
    np.testing.assert_array_equal(w2.numpy(), np.where(pad.numpy()[:, None, :, None], w.numpy(), 0.0))
    o3, w3 = zero_padded(torch.arange(6).view(1, 3, 2), None, pad[:1])
    assert w3 is None and o3.dtype == torch.int64 and o3.tolist() == [[[0, 1], [0, 0], [4, 5]]]
    _, w4 = zero_padded(out[:1], torch.ones(1, 1, 3, 2, dtype=torch.int32), pad[:1])
    assert w4.dtype == torch.int32 and w4[0, 0, :, 0].tolist() == [1, 0, 1]
