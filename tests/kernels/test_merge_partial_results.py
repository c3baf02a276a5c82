"""Merging partial attention results (``attnlab.kernels.partial``) against float64 NumPy written here:

    ℓ = log Σ_p exp ℓ_p,    o = Σ_p exp(ℓ_p − ℓ) o_p        (ℓ_p = −∞: part p has no key for the row)

a row with no key in any part: o = 0, ℓ = −∞; gradients finite everywhere, zero on such rows.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.kernels import PartialResult, attention_lse, merge
from attnlab.kernels.partial import finish_partial, merge_rows, no_keys

NEG = -np.inf


def np_merge(outs, lses):
    """outs [(..., q, d)], lses [(..., q)] float64 → (o, ℓ) by the formula, row by row."""
    L = np.stack(lses)  # (P, ..., q)
    o = np.zeros_like(outs[0])
    ell = np.full(L.shape[1:], NEG)
    for idx in np.ndindex(*L.shape[1:]):
        ls = L[(slice(None),) + idx]
        live = np.isfinite(ls)
        if not live.any():
            continue  # no key anywhere: o = 0, ℓ = −∞
        m = ls[live].max()
        ell[idx] = m + np.log(np.exp(ls[live] - m).sum())
        for p in np.flatnonzero(live):
            o[idx] += np.exp(ls[p] - ell[idx]) * outs[p][idx]
    return o, ell


def parts(seed, P=3, shape=(2, 5), d=4):
    """P random parts over the same rows; row 1 has no key in part 0, row 3 none in any part."""
    g = torch.Generator().manual_seed(seed)
    outs = [torch.randn(*shape, d, dtype=torch.float64, generator=g) for _ in range(P)]
    lses = [torch.randn(*shape, dtype=torch.float64, generator=g) * 3 for _ in range(P)]
    lses[0][..., 1] = float("-inf")
    outs[0][..., 1, :] = 0.0  # (the dead-row rule, as every producer states it)
    for p in range(P):
        lses[p][..., 3] = float("-inf")
        outs[p][..., 3, :] = 0.0
    return outs, lses


@pytest.mark.parametrize("P", [1, 2, 3])
@pytest.mark.parametrize("inplace", [False, True])
def test_merge_equals_the_log_sum_exp_formula(P, inplace):
    outs, lses = parts(P, P)
    want_o, want_l = np_merge([o.numpy() for o in outs], [lp.numpy() for lp in lses])
    got = merge([PartialResult(o.clone(), lp.clone()) for o, lp in zip(outs, lses)], inplace=inplace)
    assert isinstance(got, PartialResult)
    np.testing.assert_allclose(got.out.numpy(), want_o, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(got.lse.numpy()), np.isneginf(want_l))
    np.testing.assert_allclose(got.lse.numpy(), want_l, rtol=1e-12, atol=1e-12)
    assert (got.out[..., 3, :] == 0).all()


def test_merge_rows_merges_a_part_over_some_rows_only():
    outs, lses = parts(7, 2)
    rows = torch.tensor([4, 0, 1])
    sub_o, sub_l = outs[1][..., rows, :], lses[1][..., rows]
    # the same merge with the part spread over all rows (−∞ elsewhere)
    full_o, full_l = torch.zeros_like(outs[1]), torch.full_like(lses[1], float("-inf"))
    full_o[..., rows, :], full_l[..., rows] = sub_o, sub_l
    want_o, want_l = np_merge([outs[0].numpy(), full_o.numpy()], [lses[0].numpy(), full_l.numpy()])
    got_o, got_l = merge_rows(PartialResult(outs[0].clone(), lses[0].clone()), PartialResult(sub_o.clone(), sub_l.clone()), rows)
    np.testing.assert_allclose(got_o.numpy(), want_o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_l.numpy(), want_l, rtol=1e-12, atol=1e-12)


def test_merge_gradients_follow_the_formula_and_stay_finite_on_rows_without_a_key():
    outs, lses = parts(3, 3)
    o_t = [o.clone().requires_grad_() for o in outs]
    l_t = [lp.clone().requires_grad_() for lp in lses]
    out, lse = merge(list(zip(o_t, l_t)))
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    gl = torch.randn(lse.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    fin = torch.isfinite(lse)
    ((out * g).sum() + (lse[fin] * gl[fin]).sum()).backward()
    # ∂L/∂o_p = w_p g,  ∂L/∂ℓ_p = w_p (g·(o_p − o) + g_ℓ),  w_p = exp(ℓ_p − ℓ) (0 where ℓ_p = −∞)
    o_np, l_np = np_merge([o.numpy() for o in outs], [lp.numpy() for lp in lses])
    live = np.isfinite(l_np)
    for o_p, l_p, ot, lt in zip(outs, lses, o_t, l_t):
        w = np.where(np.isfinite(l_p.numpy()) & live, np.exp(l_p.numpy() - np.where(live, l_np, 0.0)), 0.0)
        want_do = w[..., None] * g.numpy()
        want_dl = w * (((o_p.numpy() - o_np) * g.numpy()).sum(-1) + np.where(live, gl.numpy(), 0.0))
        assert torch.isfinite(ot.grad).all() and torch.isfinite(lt.grad).all()
        np.testing.assert_allclose(ot.grad.numpy(), want_do, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(lt.grad.numpy(), want_dl, rtol=1e-10, atol=1e-12)
        assert (ot.grad[..., 3, :] == 0).all() and (lt.grad[..., 3] == 0).all()  # no key in any part


def test_merge_ignores_what_a_part_holds_where_it_has_no_key_and_keeps_a_nan_row():
    o1, l1 = torch.ones(3, 2, dtype=torch.float64), torch.tensor([0.0, 0.0, float("nan")], dtype=torch.float64)
    o2 = torch.tensor([[float("nan"), float("inf")], [2.0, 2.0], [2.0, 2.0]], dtype=torch.float64)
    l2 = torch.tensor([float("-inf"), 0.0, 0.0], dtype=torch.float64)
    out, lse = merge([(o1, l1), (o2, l2)])
    np.testing.assert_allclose(out[:2].numpy(), [[1.0, 1.0], [1.5, 1.5]], atol=1e-12)
    np.testing.assert_allclose(lse[:2].numpy(), [0.0, np.log(2.0)], atol=1e-12)
    assert torch.isnan(lse[2]) and torch.isnan(out[2]).all()  # a row that attended a non-finite key


def test_finish_partial_and_no_keys_state_rows_without_a_key():
    out, lse = torch.full((2, 3, 2), float("nan")), torch.zeros(2, 3)
    dead = torch.tensor([[True, False, False], [False, False, True]])
    got = finish_partial(out, lse, dead)
    assert (got.out[dead] == 0).all() and torch.isnan(got.out[~dead]).all()
    assert torch.isneginf(got.lse[dead]).all() and (got.lse[~dead] == 0).all()
    assert finish_partial(out, lse, None) == (out, lse)
    none = no_keys(torch.zeros(1, dtype=torch.float64), (2, 3, 4))
    assert none.out.shape == (2, 3, 4) and none.out.dtype == torch.float64 and (none.out == 0).all()
    assert none.lse.shape == (2, 3) and torch.isneginf(none.lse).all()


def test_merge_names_what_it_was_given():
    with pytest.raises(ValueError, match="at least one partial result"):
        merge([])
    with pytest.raises(ValueError, match=re.escape("the parts must cover the same query rows with the same d_v; "
                                                   "got outputs [(2, 3, 4), (2, 5, 4)]")):
        merge([(torch.zeros(2, 3, 4), torch.zeros(2, 3)), (torch.zeros(2, 5, 4), torch.zeros(2, 5))])


def test_attention_lse_with_an_additive_mask_and_a_non_finite_query():
    g = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, generator=g) for _ in range(3))
    bias = torch.tensor([[0.5, -1.0, float("-inf"), 0.0]] * 3 + [[float("-inf")] * 4], dtype=torch.float64)  # (q, k)
    q[2, 1] = float("nan")  # row 2's own query is not finite: its output and ℓ are NaN
    out, lse = attention_lse(q, k, v, bias, scale=0.7)
    s = 0.7 * q.numpy() @ k.numpy().T + bias.numpy()
    for i in (0, 1):
        m = s[i][np.isfinite(s[i])].max()
        ell = m + np.log(np.exp(s[i][np.isfinite(s[i])] - m).sum())
        np.testing.assert_allclose(lse[i].item(), ell, rtol=1e-12)
        np.testing.assert_allclose(out[i].numpy(), np.exp(s[i] - ell) @ v.numpy(), rtol=1e-12, atol=1e-12)
    assert torch.isnan(lse[2]) and torch.isnan(out[2]).all()
    assert torch.isneginf(lse[3]) and (out[3] == 0).all()  # bias −∞ on every key of row 3
