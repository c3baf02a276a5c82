"""The non-finite rule's helpers and the reference/fast paths of ``attention`` at their edges.

Each test compares with values written by hand or with the float64 NumPy reference
(``tests/np_reference.py``): the row test of ``nonfinite_rows`` in each dtype (and the overflow its
docstring states), ``zero_nonfinite_entries`` and its zero gradient, ``finish_nonfinite`` keeping
the output's dtype, the scale of ``"scaled_dot"`` applied to the product q·kᵀ (not to q, which may
overflow), broadcast leading dims on the reference path, dropout's rate on the reference path, and
the zero weights of a fully masked row whose raw scores overflow.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.functional.attention import (
    attention,
    finish_nonfinite,
    nonfinite_rows,
    zero_nonfinite_entries,
)

import np_reference as ref

NAN, INF = float("nan"), float("inf")


# --- nonfinite_rows: one sum per row, in float32 at least (float64 for float64) ---------------------


def test_nonfinite_rows_float16_sums_past_the_float16_range_count_as_finite():
    # 40000 + 40000 = 80000 is past float16's maximum (65504) but the entries are finite: the sum is
    # taken in float32, so only the NaN and inf rows are flagged
    x = torch.tensor([[4e4, 4e4], [1.0, 2.0], [NAN, 0.0], [INF, 0.0], [0.0, -INF]], dtype=torch.float16)
    assert nonfinite_rows(x).tolist() == [False, False, True, True, True]


def test_nonfinite_rows_float64_rows_beyond_float32_are_finite():
    # 1e300 is finite in float64 (and would be inf in float32): the float64 sum keeps it finite
    x = torch.tensor([[1e300, 1e300], [-1e300, 2.0], [1.0, NAN], [3.0, -INF]], dtype=torch.float64)
    assert nonfinite_rows(x).tolist() == [False, False, True, True]


def test_nonfinite_rows_float32_sum_overflow_counts_as_nonfinite_as_documented():
    # the docstring: "A finite row whose sum overflows float32 (entries near 1e38) is counted as non-finite too"
    x = torch.tensor([[3e38, 3e38], [3e38, -3e38], [1.0, 2.0]], dtype=torch.float32)
    assert nonfinite_rows(x).tolist() == [True, False, False]
    assert nonfinite_rows(x.to(torch.bfloat16)).tolist() == [True, False, False]  # summed in float32 too


# --- zero_nonfinite_entries: NaN, +inf and -inf become 0, their gradient 0 --------------------------


def test_zero_nonfinite_entries_sets_nan_and_both_infinities_to_zero_with_zero_gradient():
    x = torch.tensor([NAN, INF, -INF, 1.5, -2.0, 0.0], requires_grad=True)
    y = zero_nonfinite_entries(x)
    assert y.tolist() == [0.0, 0.0, 0.0, 1.5, -2.0, 0.0]
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


# --- finish_nonfinite: NaN rows, zero rows, in the output's own dtype ------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_finish_nonfinite_keeps_the_output_dtype_with_hit_and_dead_rows(dtype):
    out = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]], dtype=dtype)  # (1, q=4, 2)
    hit = torch.tensor([[False, True, True, False]])  # (1, 4)
    dead = torch.tensor([[[False], [False], [True], [True]]])  # (1, 4, 1): the dead row wins over hit
    got = finish_nonfinite(out, hit, dead)
    assert got.dtype == dtype
    assert got[0, 0].tolist() == [1.0, 2.0]
    assert torch.isnan(got[0, 1]).all()
    assert got[0, 2].tolist() == [0.0, 0.0] and got[0, 3].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("need_weights", [False, True])
def test_attention_in_bfloat16_with_a_nan_key_and_a_fully_masked_row_returns_bfloat16(need_weights):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, n, 4, generator=g, dtype=torch.float64) for n in (3, 4, 4))
    k[0, 2, 1] = NAN  # key 2: row 0 may attend it (NaN), row 1 may not, row 2 attends nothing (zero)
    allowed = np.array([[1, 1, 1, 1], [1, 1, 0, 1], [0, 0, 0, 0]], dtype=bool)
    out, _ = attention(*(t.to(torch.bfloat16) for t in (q, k, v)), mask=torch.from_numpy(allowed),
                       need_weights=need_weights)
    assert out.dtype == torch.bfloat16
    assert torch.isnan(out[0, 0]).all()
    assert out[0, 2].tolist() == [0.0] * 4
    want, _ = ref.attention(q.numpy(), np.nan_to_num(k.numpy()), v.numpy(), allowed=allowed)
    np.testing.assert_allclose(out[0, 1].double().numpy(), want[0, 1], atol=3e-2)


# --- the reference path's scores: s · (q kᵀ), with any broadcast of the leading dims ----------------


@pytest.mark.parametrize("lead", [(2,), (2, 3)])
def test_scaled_dot_scale_multiplies_the_product_not_the_query(lead):
    # |q|·s = 1e39 overflows float32, s·(q·k) ≈ 1 does not: the weights are the float64 reference's
    g = torch.Generator().manual_seed(5)
    q = torch.randn(*lead, 3, 2, generator=g, dtype=torch.float64) * 1e36
    k = torch.randn(*lead, 4, 2, generator=g, dtype=torch.float64) * 1e-36
    v = torch.randn(*lead, 4, 3, generator=g, dtype=torch.float64)
    out, w = attention(q.float(), k.float(), v.float(), scale=1e3, need_weights=True)
    want, want_w = ref.attention(q.numpy(), k.numpy(), v.numpy(), scores_fn=lambda a, b: ref.scaled_dot(a, b, 1e3))
    np.testing.assert_allclose(w.double().numpy(), want_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.double().numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "q_shape, k_shape",
    [
        ((5, 4, 2, 4), (5, 4)),  # one (k, d) key for every leading index, k = 5, d = 4 = the query's lead
        ((3, 3, 5, 4), (3, 5, 4)),  # key lead (3,) broadcast against (3, 3)
        ((3, 2, 4), (3, 3, 5, 4)),  # the query has fewer leading dims than the key
    ],
)
def test_reference_path_broadcasts_leading_dims_like_numpy(q_shape, k_shape):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(*q_shape, generator=g, dtype=torch.float64)
    k = torch.randn(*k_shape, generator=g, dtype=torch.float64)
    v = torch.randn(*k_shape[:-1], 3, generator=g, dtype=torch.float64)
    out, w = attention(q.float(), k.float(), v.float(), need_weights=True)
    want, want_w = ref.attention(q.numpy(), k.numpy(), v.numpy())
    assert out.shape == want.shape and w.shape == want_w.shape
    np.testing.assert_allclose(w.double().numpy(), want_w, atol=1e-5)
    np.testing.assert_allclose(out.double().numpy(), want, atol=1e-5)


# --- dropout on the reference path ----------------------------------------------------------------


def test_reference_path_dropout_drops_at_rate_p_and_rescales_by_one_over_one_minus_p():
    # value = identity: the output row is the dropped weight row itself, entry by entry 0 or α_ij / (1 - p)
    torch.manual_seed(11)
    p, n = 0.2, 64
    q, k = torch.randn(1, n, 8), torch.randn(1, n, 8)
    out, w = attention(q, k, torch.eye(n).unsqueeze(0), dropout_p=p, need_weights=True)
    kept = out != 0
    np.testing.assert_allclose(out[kept].numpy(), (w[kept] / (1 - p)).numpy(), rtol=1e-5)
    rate = 1.0 - kept.float().mean().item()  # 4096 entries: the standard error is 0.006
    assert abs(rate - p) < 0.05


# --- a fully masked row whose raw scores overflow: still zero weights -------------------------------


def test_fully_masked_row_with_overflowing_scores_gets_zero_weights():
    # query row 1 attends nothing; its raw scores q·k = 2e39 overflow float32 to inf. The contract:
    # a row that may attend nothing gets zero weights and a zero output, whatever its scores.
    # (Inputs without grad here; test_dead_row_overflow.py checks the same row with gradients.)
    q = torch.tensor([[[0.5, -1.0], [1e38, 1e38], [1.0, 0.25]]], dtype=torch.float64)
    k = torch.tensor([[[10.0, 10.0], [1.0, 2.0], [-1.0, 0.5], [0.0, 1.0]]], dtype=torch.float64)
    v = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, -1.0], [0.5, 0.5]]], dtype=torch.float64)
    allowed = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=bool)
    out, w = attention(q.float(), k.float(), v.float(), mask=torch.from_numpy(allowed), need_weights=True)
    assert w[0, 1].tolist() == [0.0] * 4 and out[0, 1].tolist() == [0.0] * 2
    want, want_w = ref.attention(q.numpy(), k.numpy(), v.numpy(), allowed=allowed)
    np.testing.assert_allclose(w.double().numpy(), want_w, atol=1e-6)
    np.testing.assert_allclose(out.double().numpy(), want, atol=1e-6)
