"""The float64 reference of attnlab.testing (masked softmax attention, causal top-left/bottom-right,
the default scale 1/√d and a given one) against NumPy written here; its contract at masked positions
(NaN/inf never reach the output or gradients, fully masked rows are zeros); and the comparison budget
of each dtype, just inside and just outside |got - want| ≤ budget · (1 + |want|), ten times for
gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.testing import RuleBroken, judge, reference
from attnlab.testing.reference import ALIGNMENTS, allowed, causal_pairs
from attnlab.testing.rules import BUDGET, PLANTED, close

F64 = torch.float64


def np_attention(q, k, v, allow, scale=None):
    """float64 NumPy; allow (b, h, q, k) True = may attend; a row with no allowed key gives zeros."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(*q.shape[:-1]):
        b, h, i = idx
        keys = [j for j in range(k.shape[-2]) if allow[b, h, i, j]]
        if not keys:
            continue
        s = np.array([scale * q[b, h, i] @ k[b, h, j] for j in keys])
        w = np.exp(s - s.max())
        w /= w.sum()
        out[idx] = sum(wj * v[b, h, j] for wj, j in zip(w, keys))
    return out


def _qkv(b, h, n, m, d, seed=0, dv=None):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=g, dtype=F64),
        torch.randn(b, h, m, d, generator=g, dtype=F64),
        torch.randn(b, h, m, dv or d, generator=g, dtype=F64),
    )


def test_causal_pairs_top_left_and_bottom_right_by_hand():
    assert ALIGNMENTS == ("top_left", "bottom_right")
    tl = causal_pairs(2, 4, "top_left")
    assert tl.dtype == torch.bool and tl.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0]]
    assert causal_pairs(2, 4, "bottom_right").tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert causal_pairs(3, 2, "bottom_right").tolist() == [[0, 0], [1, 0], [1, 1]]
    assert causal_pairs(3, 2, "top_left").tolist() == [[1, 0], [1, 1], [1, 1]]
    assert causal_pairs(2, 2, "bottom_right").tolist() == causal_pairs(2, 2, "top_left").tolist()
    with pytest.raises(ValueError) as err:
        causal_pairs(2, 2, "Top_Left")
    assert (
        str(err.value) == "causal alignment 'Top_Left' is not one of ('top_left', 'bottom_right')"
    )


def test_allowed_is_the_dense_mask_and_true_means_top_left():
    keys = torch.tensor([True, False, True])
    assert allowed(None, False, (1, 2, 2, 3), "cpu").tolist() == [[[[True] * 3] * 2] * 2]
    got = allowed(keys, True, (2, 1, 2, 3), "cpu")
    assert got.shape == (2, 1, 2, 3) and got.dtype == torch.bool
    assert got[1, 0].tolist() == [[True, False, False], [True, False, False]]
    assert allowed(keys, "bottom_right", (1, 1, 2, 3), "cpu")[0, 0].tolist() == [
        [True, False, False],
        [True, False, True],
    ]
    from_ints = allowed(
        torch.tensor([1, 0, 1]), False, (1, 1, 1, 3), "cpu"
    )  # a 0/1 mask is read as bool
    assert from_ints.dtype == torch.bool and from_ints.tolist() == [[[[True, False, True]]]]


@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right", True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_the_reference_is_masked_softmax_attention_in_numpy(causal, scale):
    b, h, n, m, d = 2, 2, 3, 4, 4
    q, k, v = _qkv(b, h, n, m, d, dv=3)
    allow = torch.tensor([[True, False, True, True], [True, True, True, False]]).reshape(2, 1, 1, 4)
    dense = np.broadcast_to(allow.numpy(), (b, h, n, m)).copy()
    if causal:
        shift = m - n if causal == "bottom_right" else 0
        dense &= np.arange(m)[None, :] <= np.arange(n)[:, None] + shift
    got = reference(q, k, v, allow, causal=causal, scale=scale)
    assert got.dtype == F64 and got.shape == (b, h, n, 3)
    np.testing.assert_allclose(
        got.numpy(), np_attention(q, k, v, dense, scale), rtol=1e-12, atol=1e-13
    )
    if causal == "bottom_right":
        assert not np.allclose(
            got.numpy(), reference(q, k, v, allow, causal="top_left", scale=scale).numpy()
        )


def test_the_reference_computes_in_float64_from_any_dtype_and_with_no_mask():
    q, k, v = (t.float() for t in _qkv(1, 1, 2, 3, 2, seed=1))
    got = reference(q, k, v)
    assert got.dtype == F64
    np.testing.assert_allclose(
        got.numpy(),
        np_attention(q.double(), k.double(), v.double(), np.ones((1, 1, 2, 3))),
        rtol=1e-12,
    )


def test_nan_and_inf_at_keys_no_query_attends_reach_neither_output_nor_gradients():
    q, k, v = _qkv(1, 2, 3, 4, 2, seed=2)
    allow = torch.tensor([True, True, False, True])
    want = np_attention(q, k, v, np.broadcast_to(allow.numpy(), (1, 2, 3, 4)))
    k[..., 2, :] = torch.inf
    v[..., 2, :] = torch.nan
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = reference(q, k, v, allow)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-12)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (k.grad[..., 2, :] == 0).all() and (v.grad[..., 2, :] == 0).all()
    # v's gradient at an attended key: the sum of its weights over the queries
    assert v.grad[..., 0, :].abs().sum() > 0


def test_a_fully_masked_row_is_zeros_with_finite_gradients_and_other_rows_are_unchanged():
    q, k, v = _qkv(1, 1, 2, 3, 2, seed=4)
    allow = torch.tensor([[False, False, False], [True, False, True]]).reshape(1, 1, 2, 3)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = reference(q, k, v, allow)
    assert out[0, 0, 0].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(
        out[0, 0, 1].detach().numpy(),
        np_attention(q.detach(), k.detach(), v.detach(), allow.numpy())[0, 0, 1],
        rtol=1e-12,
    )
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad[0, 0, 0].tolist() == [0.0, 0.0]
    assert k.grad[0, 0, 1].tolist() == [0.0, 0.0]  # key 1: no query attends it


def test_the_budgets_per_dtype_and_what_each_planted_case_is_called():
    assert BUDGET == {
        torch.float64: 1e-9,
        torch.float32: 2e-5,
        torch.float16: 4e-3,
        torch.bfloat16: 3e-2,
    }
    assert PLANTED == {
        "masked NaN value": "NaN in a masked value",
        "masked inf key": "inf in a masked key",
        "local window": "NaN in a key outside every window",
        "random row masks": "NaN in a key no row may attend",
        "causal": "a NaN in a future key",
    }


def test_close_at_the_edge_of_budget_times_one_plus_the_size_of_want():
    want = torch.tensor([0.0, 4.0], dtype=F64)
    budget = 1e-3
    close(want + torch.tensor([0.99e-3, 0.0], dtype=F64), want, budget)  # 1e-3 · (1 + 0)
    close(want + torch.tensor([0.0, 4.9e-3], dtype=F64), want, budget)  # 1e-3 · (1 + 4)
    with pytest.raises(
        RuleBroken, match=r"^differs from the reference: max \|error\| 1\.0e-03 at \(0,\)$"
    ):
        close(want + torch.tensor([1.01e-3, 0.0], dtype=F64), want, budget)
    with pytest.raises(
        RuleBroken, match=r"^differs from the reference: max \|error\| 5\.1e-03 at \(1,\)$"
    ):
        close(want + torch.tensor([0.0, 5.1e-3], dtype=F64), want, budget)
    with pytest.raises(RuleBroken, match=r"max \|error\| 5\.1e-03 at \(1,\)$"):
        close(-want - torch.tensor([0.0, 5.1e-3], dtype=F64), -want, 1e-3)  # |want|, not want
    close(torch.empty(0), torch.empty(0, dtype=F64), budget)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_judge_holds_each_dtype_to_its_budget_just_inside_and_just_outside(dtype):
    q, k, v = (t.to(dtype) for t in _qkv(1, 1, 2, 3, 2, seed=5))
    want = torch.from_numpy(np_attention(q.double(), k.double(), v.double(), np.ones((1, 1, 2, 3))))
    budget = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}[
        dtype
    ]
    # the output's own rounding to dtype eats into the budget: half of it inside, 1.6 times outside
    inside, outside = ((want + f * budget * (1 + want.abs())).to(dtype) for f in (0.5, 1.6))
    judge("values", inside, q, k, v, grad=False)
    with pytest.raises(RuleBroken, match="^differs from the reference"):
        judge("values", outside, q, k, v, grad=False)


def test_gradients_get_ten_times_the_budget():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 1, 2, 3, 2, seed=6))
    cot = torch.randn(
        1, 1, 2, 2, generator=torch.Generator().manual_seed(0), dtype=F64
    )  # judge's cotangent

    def textbook(q, k, v):
        return (q @ k.transpose(-2, -1) / math.sqrt(2)).softmax(-1) @ v

    (gq,) = torch.autograd.grad(textbook(q, k, v), q, cot)
    ratio = float(
        (cot.abs() / (1 + gq.abs())).max()
    )  # a gradient error eps · |cot| against 1 + |gq|
    for factor, ok in ((9.5, True), (10.5, False)):
        eps = factor * 1e-9 / ratio
        out = textbook(q, k, v) + eps * (
            q - q.detach()
        )  # the right output, the gradient of q off by eps · cot
        if ok:
            judge("values", out, q, k, v)
        else:
            with pytest.raises(RuleBroken, match="^the gradient of q differs from the reference"):
                judge("values", out, q, k, v)


def test_an_infinite_difference_reads_inf_not_the_largest_float():
    """An inf output (or an inf against a finite clean run) is reported as inf, as a NaN is."""
    from attnlab.testing.rules import untouched

    want = torch.tensor([0.0, 4.0], dtype=F64)
    with pytest.raises(
        RuleBroken, match=r"^differs from the reference: max \|error\| inf at \(1,\)$"
    ):
        close(torch.tensor([0.0, float("inf")], dtype=F64), want, 1e-3)
    with pytest.raises(
        RuleBroken, match=r"^differs from the reference: max \|error\| inf at \(0,\)$"
    ):
        close(torch.tensor([float("nan"), 4.0], dtype=F64), want, 1e-3)
    with pytest.raises(RuleBroken, match=r"^NaN changed the output: max \|difference\| inf$"):
        untouched("NaN", "the output", want, torch.tensor([0.0, float("inf")], dtype=F64))
    q, k, v = _qkv(1, 1, 1, 2, 1)
    out = reference(q, k, v)
    with pytest.raises(
        RuleBroken,
        match=r"^two calls on the same input give different outputs: max \|difference\| inf$",
    ):
        judge("deterministic", out, q, k, v, again=out + torch.inf)


def test_a_nan_key_a_later_row_sees_reaches_only_that_row_of_the_reference_and_no_gradient_of_q():
    q, k, v = _qkv(1, 2, 4, 4, 2, seed=8)
    k[..., 3, 0] = torch.nan  # key 3: only the last row may see it (causal, q = k)
    v[..., 3, 1] = torch.inf
    q.requires_grad_()
    out = reference(q, k, v, causal="top_left")
    allow = np.broadcast_to(np.tril(np.ones((4, 4), dtype=bool)), (1, 2, 4, 4))
    np.testing.assert_allclose(out[..., :3, :].detach().numpy(), np_attention(q.detach().numpy(), np.nan_to_num(k.numpy()), v.numpy(), allow)[..., :3, :],
                               rtol=0, atol=1e-12)
    assert bool(out[..., 3, :].isnan().all())  # a row that may attend a NaN or inf is NaN: never compared
    cot = torch.ones_like(out).index_fill(-2, torch.tensor([3]), 0.0)  # as judge: no cotangent on that row
    (grad,) = torch.autograd.grad(out, q, cot)
    assert bool(torch.isfinite(grad).all()) and grad[..., 3, :].abs().max() == 0
    clean = q.detach()[..., :3, :].requires_grad_()  # the first three rows never see key 3
    (want,) = torch.autograd.grad(reference(clean, k[..., :3, :], v[..., :3, :], causal="top_left"), clean,
                                  torch.ones(1, 2, 3, 2, dtype=F64))
    torch.testing.assert_close(grad[..., :3, :], want, rtol=0, atol=1e-12)
    assert want[..., 1:, :].abs().max() > 0.01  # rows 1 and 2 see two and three keys: a gradient to compare
