"""Differential attention (Ye et al. 2024, eqs. 1–2) with each option of the functional form, against
float64 NumPy written from the equations: an explicit scale, a Python-float λ at full precision,
dropout in both maps, the defaults; λ's re-parametrisation per head; λ_init's refusals.

    DiffAttn = (softmax(Q_1 K_1ᵀ · s) − λ softmax(Q_2 K_2ᵀ · s)) V
    λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init,   λ_init = 0.8 − 0.6 exp(−0.3 · depth)
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.functional.differential import differential_attention, lambda_init, reparam_lambda


def softmax(e):
    p = np.exp(e - e.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def inputs(seed, n_q=3, n_k=4, d=4, d_v=2):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n_q, d)), rng.normal(size=(n_k, d)), rng.normal(size=(n_q, d)),
            rng.normal(size=(n_k, d)), rng.normal(size=(n_k, d_v)))


def test_an_explicit_scale_is_used_in_both_maps():
    q1, k1, q2, k2, v = inputs(0)
    a1, a2 = softmax(0.9 * q1 @ k1.T), softmax(0.9 * q2 @ k2.T)  # scale 0.9, not 1/√4
    out, w = differential_attention(*(torch.tensor(a) for a in (q1, k1, q2, k2, v)), 0.25, scale=0.9, need_weights=True)
    np.testing.assert_allclose(w.numpy(), a1 - 0.25 * a2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), (a1 - 0.25 * a2) @ v, rtol=1e-12, atol=1e-12)


def test_defaults_non_causal_no_weights_and_lambda_at_the_inputs_precision():
    # λ = 0.3 as a Python float: in float64 it is 0.3 to 1e-16, not float32's 0.30000001
    q1, k1, q2, k2, v = inputs(1)
    out, w = differential_attention(*(torch.tensor(a) for a in (q1, k1, q2, k2, v)), 0.3)
    assert w is None
    want = (softmax(q1 @ k1.T / 2.0) - 0.3 * softmax(q2 @ k2.T / 2.0)) @ v
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-14, atol=1e-15)


def test_dropout_reaches_both_maps():
    # v = I: each output row is A_1' − λ A_2', each map dropped out independently (entries 0 or α / (1 − p));
    # with λ = 0 the output is the first dropped map alone, with about half its entries zero
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    q1, k1 = rng.normal(size=(2, 30, 4)), rng.normal(size=(2, 20, 4))
    T = torch.tensor
    eye = torch.eye(20, dtype=torch.float64).expand(2, 20, 20)
    out, w = differential_attention(T(q1), T(k1), T(q1), T(k1), eye, 0.0, dropout_p=0.5, need_weights=True)
    a1 = softmax(q1 @ k1.transpose(0, 2, 1) / 2.0)
    np.testing.assert_allclose(w.numpy(), a1, rtol=1e-12)  # the weights before dropout
    o = out.numpy()
    dropped = o == 0.0
    np.testing.assert_allclose(o[~dropped], 2.0 * a1[~dropped], rtol=1e-12)
    assert 0.4 < dropped.mean() < 0.6


@pytest.mark.parametrize("heads", [None, 3])
def test_reparam_lambda_is_the_difference_of_two_exponentiated_dot_products_per_head(heads):
    rng = np.random.default_rng(3)
    shape = (8,) if heads is None else (heads, 8)
    lq1, lk1, lq2, lk2 = (rng.normal(size=shape) * 0.3 for _ in range(4))
    lam = reparam_lambda(*(torch.tensor(a) for a in (lq1, lk1, lq2, lk2)), 0.2)
    want = np.exp((lq1 * lk1).sum(-1)) - np.exp((lq2 * lk2).sum(-1)) + 0.2
    assert lam.shape == np.shape(want)
    np.testing.assert_allclose(lam.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("depth", [-1, -5, 2.5, 1.0, True, "3", None])
def test_lambda_init_refuses_what_is_not_a_non_negative_int(depth):
    msg = f"depth (the 0-based layer index, l − 1) must be an integer >= 0; got {depth!r}"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        lambda_init(depth)
