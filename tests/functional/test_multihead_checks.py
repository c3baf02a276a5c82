"""``multi_head_attention``'s head checks (exact messages, the head size returned) and its defaults."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.functional import multihead as mh

r = torch.randn


@pytest.mark.parametrize(
    "h, h_kv, wq_rows, wk_rows, wv_rows, message",
    [
        (0, 1, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=0, num_kv_heads=1"),
        (2, 0, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=2, num_kv_heads=0"),
        (4, 3, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=4, num_kv_heads=3"),
        (2, 1, 3, 4, 4, "w_q's output features must be a positive multiple of num_heads=2; got (3, 3)"),
        (2, 1, 0, 4, 4, "w_q's output features must be a positive multiple of num_heads=2; got (0, 3)"),
        (4, 2, 12, 5, 6, "w_k must have num_kv_heads·head_dim = 2·3 = 6 output features; got shape (5, 3)"),
        (4, 2, 12, 6, 5, "w_v must have num_kv_heads·head_dim = 2·3 = 6 output features; got shape (5, 3)"),
    ],
)
def test_check_heads_errors_give_the_counts_and_shapes(h, h_kv, wq_rows, wk_rows, wv_rows, message) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        mh.check_heads(h, h_kv, r(wq_rows, 3), r(wk_rows, 3), r(wv_rows, 3))


@pytest.mark.parametrize("h, h_kv, rows, kv_rows, head_dim", [(1, 1, 1, 1, 1), (4, 2, 12, 6, 3), (2, 2, 4, 4, 2)])
def test_check_heads_returns_the_integer_head_size(h, h_kv, rows, kv_rows, head_dim) -> None:
    got = mh.check_heads(h, h_kv, r(rows, 3), r(kv_rows, 3), r(kv_rows, 3))
    assert got == head_dim and type(got) is int


def test_multi_head_attention_returns_no_weights_unless_asked_and_the_numpy_heads_when_asked() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 3, 4))
    w_q, w_k, w_v, w_o = (rng.normal(size=(4, 4)) for _ in range(4))
    args = {n: torch.tensor(a) for n, a in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o))}
    xt = torch.tensor(x)
    out, weights = mh.multi_head_attention(xt, xt, xt, num_heads=2, **args)
    assert weights is None
    out2, weights2 = mh.multi_head_attention(xt, xt, xt, num_heads=2, need_weights=True, **args)
    # reference: per head i (features 2i, 2i+1), α = softmax(Q_i K_iᵀ / √2)
    q, k, v = x[0] @ w_q.T, x[0] @ w_k.T, x[0] @ w_v.T
    heads, alphas = [], []
    for i in range(2):
        sl = slice(2 * i, 2 * i + 2)
        e = q[:, sl] @ k[:, sl].T / np.sqrt(2)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        alphas.append(a)
        heads.append(a @ v[:, sl])
    ref = np.concatenate(heads, -1) @ w_o.T
    np.testing.assert_allclose(out.numpy()[0], ref, rtol=1e-10)
    np.testing.assert_allclose(out2.numpy()[0], ref, rtol=1e-10)
    np.testing.assert_allclose(weights2.numpy()[0], np.stack(alphas), rtol=1e-10)
