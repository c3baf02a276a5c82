"""Bahdanau and Luong with precomputed keys: NaN or inf at padded keys reach no output and no
gradient, the weights' included, also when ``precompute(keys)`` was called without the mask.

References, written here in float64 torch from the papers' scores: additive vᵀ tanh(W_q s + W_k h),
general sᵀ W_a h, concat vᵀ tanh(W [s; h]); −∞ where padded, softmax, weighted sum of the keys.
"""

from __future__ import annotations

import pytest
import torch

import attnlab

D, A = 4, 5


def _score(name, p):
    if name == "bahdanau":
        return lambda s, h: torch.tanh((s @ p["w_q.weight"].T)[:, :, None] + (h @ p["w_k.weight"].T)[:, None]) @ p["v"]
    if name == "luong-general":
        return lambda s, h: s @ (h @ p["weight.weight"].T).transpose(1, 2)
    w = p["weight.weight"]
    return lambda s, h: torch.tanh((s @ w[:, :D].T)[:, :, None] + (h @ w[:, D:].T)[:, None]) @ p["v"]


def _reference(name, params, query, keys, pad):
    e = _score(name, params)(query, keys).masked_fill(~pad[:, None, :], float("-inf"))  # (b, q, k)
    return torch.softmax(e, -1).nan_to_num(0.0) @ keys


@pytest.mark.parametrize("name", ["bahdanau", "luong-general", "luong-concat"])
@pytest.mark.parametrize("poison", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("precompute_mask", [False, True])
def test_non_finite_padded_keys_reach_no_weight_gradient(name, poison, precompute_mask):
    torch.manual_seed(0)
    m = attnlab.create(name, query_dim=D, key_dim=D, **({} if name == "luong-general" else {"attn_dim": A})).double()
    keys = torch.randn(2, 6, D, dtype=torch.float64)
    query = torch.randn(2, 3, D, dtype=torch.float64)
    pad = torch.ones(2, 6, dtype=torch.bool)
    pad[0, 2] = pad[1, 4:] = False
    dirty = keys.masked_fill(~pad[..., None], poison).requires_grad_()
    q = query.clone().requires_grad_()
    pk = m.precompute(dirty, mask=pad if precompute_mask else None)
    out, _ = m(q, dirty, mask=pad, projected_keys=pk)
    g = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    names = [n for n, _ in m.named_parameters()]
    got = torch.autograd.grad((out * g).sum(), [q, dirty, *m.parameters()])

    params = {n: p.detach().clone().requires_grad_() for n, p in m.named_parameters()}
    q2, k2 = query.clone().requires_grad_(), keys.clone().requires_grad_()
    want_out = _reference(name, params, q2, k2, pad)
    want = torch.autograd.grad((want_out * g).sum(), [q2, k2, *params.values()])
    torch.testing.assert_close(out, want_out, rtol=0, atol=1e-12)
    for what, a, b in zip(["query", "keys", *names], got, want):
        assert torch.isfinite(a).all(), what
        if what == "keys":
            assert torch.equal(a[~pad], torch.zeros_like(a[~pad]))  # the padded keys' own gradient
            a, b = a[pad], b[pad]
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=what)


def test_a_non_finite_key_that_a_row_may_attend_makes_that_row_nan():
    torch.manual_seed(1)
    m = attnlab.create("luong-general", query_dim=D, key_dim=D).double()
    keys = torch.randn(2, 6, D, dtype=torch.float64)
    keys[0, 1, 2] = float("nan")
    out, _ = m(torch.randn(2, 3, D, dtype=torch.float64), keys, projected_keys=m.precompute(keys))
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
