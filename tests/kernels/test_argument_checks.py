"""The kernels' entry checks: a bad scale, dtype, k, padding mask or cu_seqlens raises a ValueError
(TypeError for dtypes) that names the argument and the value given; a (b, 1, 1, n) or (b, n) padding
mask of top-k attention means the same keys as (b, 1, n) (against a float64 NumPy top-k written here)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import (
    block_sparse_attention,
    neighborhood_attention_2d,
    top_k,
    topk_attention,
    varlen_attention,
    weights_for_rows,
)
from attnlab.kernels.varlen import lengths_of

pytestmark = pytest.mark.usefixtures("one_thread")

B, H, N, D = 2, 2, 8, 4


def _qkv(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(B, H, N, D, generator=g, dtype=dtype) for _ in range(3))


def _packed(q, k, v):
    return tuple(t[0].transpose(0, 1) for t in (q, k, v))  # (total, h, d)


def _grid(q, k, v):
    return tuple(t.reshape(B, H, 2, 4, t.shape[-1]) for t in (q, k, v))  # (b, h, H, W, d)


# every kernel entry point that takes q, k, v and a scale, called with extra keyword arguments
ENTRIES = {
    "topk_attention": lambda q, k, v, **kw: topk_attention(q, k, v, 2, **kw),
    "top_k.mask": lambda q, k, v, **kw: top_k(2).mask(q, k, **kw),
    "block_sparse_attention": lambda q, k, v, **kw: block_sparse_attention(q, k, v, P.sliding_window(1, 1), **kw),
    "weights_for_rows": lambda q, k, v, **kw: weights_for_rows(q, k, P.sliding_window(1, 1), [0, 3], **kw),
    "varlen_attention": lambda q, k, v, **kw: varlen_attention(*_packed(q, k, v), [0, 3, 8], **kw),
    "neighborhood_attention_2d": lambda q, k, v, **kw: neighborhood_attention_2d(*_grid(q, k, v), kernel=1, **kw),
}
SCALE = re.escape("scale must be a finite positive number (or None for 1/sqrt(d)); got ")


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("scale,shown", [(float("nan"), "nan"), (0, "0.0"), (-1.0, "-1.0"), (float("inf"), "inf"),
                                         (True, "True"), ("0.5", "'0.5'")])
def test_a_scale_that_is_not_finite_and_positive_is_refused_by_every_kernel(entry, scale, shown):
    with pytest.raises(ValueError, match=SCALE + re.escape(shown)):
        ENTRIES[entry](*_qkv(), scale=scale)


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_given_finite_scale_is_used(entry):
    q, k, v = _qkv()
    a = ENTRIES[entry](q * 2.0, k, v, scale=0.25)
    b = ENTRIES[entry](q, k, v, scale=0.5)
    a, b = (x[0] if isinstance(x, tuple) else x for x in (a, b))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _int(t):
    return t.round().long()


DTYPES = {  # which tensor is changed → (the message's start, how it is changed)
    "integer query": ("query must be a floating-point tensor", lambda q, k, v: (_int(q), k, v), "torch.int64"),
    "integer key": ("key must be a floating-point tensor", lambda q, k, v: (q, _int(k), v), "torch.int64"),
    "float64 query": ("must share one dtype; got query torch.float64, key torch.float32",
                      lambda q, k, v: (q.double(), k, v), ""),
    "float64 key": ("must share one dtype; got query torch.float32, key torch.float64",
                    lambda q, k, v: (q, k.double(), v), ""),
}
VALUE_DTYPES = {
    "integer value": ("value must be a floating-point tensor", lambda q, k, v: (q, k, _int(v)), "torch.int64"),
    "float64 value": ("key torch.float32, value torch.float64", lambda q, k, v: (q, k, v.double()), ""),
}


DTYPE_CASES = [(e, c) for e in ENTRIES for c in DTYPES] + [
    (e, c) for e in ENTRIES if e not in ("top_k.mask", "weights_for_rows") for c in VALUE_DTYPES  # these take no value
]


@pytest.mark.parametrize("entry,case", DTYPE_CASES)
def test_integer_or_mixed_dtypes_raise_a_type_error_naming_the_dtypes(entry, case):
    start, change, dtype = {**DTYPES, **VALUE_DTYPES}[case]
    with pytest.raises(TypeError, match=re.escape(start) + ".*" + re.escape(dtype)):
        ENTRIES[entry](*change(*_qkv(torch.float32)))


@pytest.mark.parametrize("k", [2.5, "2", None, float("nan"), 0, True])
def test_top_k_of_a_k_that_is_not_a_positive_integer_is_a_value_error(k):
    q, kk, v = _qkv()
    want = re.escape(f"k must be an integer >= 1; got {k!r}")
    with pytest.raises(ValueError, match=want):
        top_k(k)
    with pytest.raises(ValueError, match=want):
        topk_attention(q, kk, v, k)


def test_top_k_with_no_features_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=re.escape("query must have at least one feature (d >= 1); got shape (2, 2, 8, 0)")):
        topk_attention(q[..., :0], k[..., :0], v, 2)


# --- top-k padding masks ------------------------------------------------------------------------------


def np_topk_attention(q, k, v, kk, scale, real):
    """Float64 NumPy: per row, softmax over the kk best real keys (ties: none in random data)."""
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = scale * q[b, h] @ k[b, h].T  # (n, n)
            for i in range(q.shape[2]):
                keys = [j for j in np.argsort(-np.where(real[b], s[i], -np.inf))[:kk] if real[b, j]]
                if keys:
                    e = np.exp(s[i, keys] - s[i, keys].max())
                    out[b, h, i] = (e / e.sum()) @ v[b, h, keys]
    return out


@pytest.mark.parametrize("form", ["(b, n)", "(b, 1, n)", "(b, h, n)", "(b, 1, 1, n)"])
def test_top_k_padding_mask_forms_mean_the_same_keys(form):
    q, k, v = _qkv()
    real = np.ones((B, N), dtype=bool)
    real[0, [1, 5, 6]] = False
    real[1, 0] = False
    pad = torch.from_numpy(real)
    given = {"(b, n)": pad, "(b, 1, n)": pad[:, None], "(b, h, n)": pad[:, None].expand(B, H, N),
             "(b, 1, 1, n)": pad[:, None, None]}[form]
    out = topk_attention(q, k, v, 3, mask=given)
    assert out.shape == (B, H, N, D)
    want = np_topk_attention(q.numpy(), k.numpy(), v.numpy(), 3, 1 / math.sqrt(D), real)
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)
    keep = top_k(3).mask(q, k, mask=given)
    assert keep.shape == (B, H, N, N)
    assert not keep[0, :, :, [1, 5, 6]].any() and not keep[1, :, :, 0].any()
    assert (keep.sum(-1) == 3).all()


@pytest.mark.parametrize("mask,shown", [
    (torch.ones(B, 5, dtype=torch.bool), "got shape (2, 5)"),
    (torch.ones(3, N, dtype=torch.bool), "got shape (3, 8)"),
    (torch.ones(B, 1, 2, N, dtype=torch.bool), "got shape (2, 1, 2, 8)"),
    (torch.ones(B, 1, 1, 1, N, dtype=torch.bool), "got shape (2, 1, 1, 1, 8)"),
])
def test_top_k_padding_mask_of_another_shape_names_the_expected_shapes(mask, shown):
    q, k, v = _qkv()
    want = re.escape("mask must be bool, True = may attend (a real key), shaped (b, n), (…, n) or (…, 1, n) to "
                     "match the inputs' leading dimensions (2, 2) and n=8 keys; " + shown)
    with pytest.raises(ValueError, match=want):
        topk_attention(q, k, v, 2, mask=mask)
    with pytest.raises(ValueError, match=want):
        top_k(2).mask(q, k, mask=mask)


def test_top_k_integer_padding_mask_is_a_type_error():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=re.escape("mask must be bool") + ".*" + re.escape("got dtype torch.int64")):
        topk_attention(q, k, v, 2, mask=torch.ones(B, N, dtype=torch.long))


# --- cu_seqlens -------------------------------------------------------------------------------------------

CU = "cu_seqlens must be non-decreasing integers starting at 0, [0, l_1, l_1 + l_2, …, total]"
BAD_CU = [
    ([1, 3, 8], "; got [1, 3, 8]"),
    ([0, 5, 3, 8], "; got [0, 5, 3, 8]"),
    ([0, 3.5, 8], "; got [0, 3.5, 8]"),
    ([0, True, 8], "; got [0, True, 8]"),
    (torch.tensor([0.0, 3.0, 8.0]), "; got [0.0, 3.0, 8.0] (torch.float32)"),
    (torch.tensor([[0, 3, 8]]), ", a 1-D tensor (docs + 1,); got shape (1, 3)"),
    (torch.tensor([0, 3, 8], device="meta"), ", on the CPU; got a tensor on meta"),
    ("0,3,8", " (a 1-D integer tensor or list); got str"),
    ([], "; got []"),
]


@pytest.mark.parametrize("cu,shown", BAD_CU, ids=[s for _, s in BAD_CU])
def test_bad_cu_seqlens_is_a_value_error_naming_what_was_given(cu, shown):
    q, k, v = _packed(*_qkv())
    with pytest.raises(ValueError, match=re.escape(CU + shown)):
        varlen_attention(q, k, v, cu)
    with pytest.raises(ValueError, match=re.escape(CU + shown)):
        lengths_of(cu)


@pytest.mark.parametrize("last", [7, 9])
def test_cu_seqlens_that_ends_elsewhere_than_the_total_length_is_named(last):
    q, k, v = _packed(*_qkv())
    with pytest.raises(ValueError, match=re.escape(f"must share total = cu_seqlens[-1] = {last} and h; got query (8, 2, 4)")):
        varlen_attention(q, k, v, [0, 3, last])


def test_int32_cu_seqlens_is_accepted():
    assert lengths_of(torch.tensor([0, 3, 8], dtype=torch.int32)) == (3, 5)


# --- block-sparse padding masks and rows ------------------------------------------------------------------


def test_block_sparse_padding_mask_forms_b_n_and_b_1_1_n_agree():
    q, k, v = _qkv()
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[0, 2:4] = False
    a, _ = block_sparse_attention(q, k, v, P.sliding_window(2, 2), block=4, mask=pad)
    b, _ = block_sparse_attention(q, k, v, P.sliding_window(2, 2), block=4, mask=pad[:, None, None])
    assert a.shape == b.shape == (B, H, N, D)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("rows,shown", [([0, 8], "rows must be query indices in [0, 8); got [0, 8]"),
                                        ([-1], "rows must be query indices in [0, 8); got [-1]"),
                                        ([0.5], "rows must be a 1-D list of integer query indices; got [0.5]"),
                                        ("a", "rows must be a 1-D list of integer query indices; got 'a'")])
def test_weights_for_rows_names_bad_rows(rows, shown):
    q, k, _ = _qkv()
    with pytest.raises(ValueError, match=re.escape(shown)):
        weights_for_rows(q, k, P.full(), rows)


@pytest.mark.parametrize("call", [
    lambda q, k, v, m: block_sparse_attention(q, k, v, P.full(), mask=m),
    lambda q, k, v, m: weights_for_rows(q, k, P.full(), [0], mask=m),
])
def test_block_sparse_padding_mask_that_is_not_a_tensor_is_named(call):
    with pytest.raises(ValueError, match=re.escape("mask must be a bool tensor: a key mask (b, n) or (b, 1, 1, n), or a mask broadcastable to "
                                                     "(b, h, n, n), True = may attend; got list")):
        call(*_qkv(), [[True] * N] * B)
