"""Attention dropout, checked statistically against the weights computed here in float64 NumPy.

With the values set to the identity (v_j = e_j), the output of attention is the
dropped-out weight matrix itself, D = (M ⊙ α) / (1 − p) with M_ij ~ Bernoulli(1 − p).
So for the core ``attention``, for ``MultiHeadAttention(attn_drop=p)`` and for the
block-sparse kernel we can check, over many independent draws:

* every entry of D is 0 or α_ij / (1 − p) (inverted dropout: kept weights are rescaled);
* the mean is preserved: S = Σ D / Σ α has E[S] = 1 and, over N draws,
  Var[S] = (p / (1 − p)) Σ α² / ((Σ α)² N); we require |S − 1| ≤ 6 σ;
* the drop rate of the allowed weights is p within 6 binomial standard deviations;
* masked positions (padding, outside the pattern, the causal upper triangle) stay exactly zero.

Without the 1/(1 − p) rescale, S ≈ 1 − p, which these bounds reject by hundreds of σ.
"""

import math

import numpy as np
import pytest
import torch

from attnlab.functional.attention import attention
from attnlab.kernels import block_sparse_attention
from attnlab.nn import MultiHeadAttention
from attnlab.patterns import Window

from np_reference import scaled_dot, softmax

P = 0.5
DRAWS = 40


def check_dropout(D: np.ndarray, W: np.ndarray, allowed: np.ndarray, p: float) -> None:
    """D (N, ..., q, k) dropped weights over N draws; W (..., q, k) the weights; allowed (..., q, k) bool."""
    allowed = np.broadcast_to(allowed, W.shape)
    N = D.shape[0]
    # masked positions stay zero in every draw
    assert np.all(D[:, ~allowed] == 0.0)
    pos = allowed & (W > 0)
    Dp = D[:, pos]  # (N, m)
    Wp = np.broadcast_to(W[pos], Dp.shape)
    # each entry is dropped (0) or kept and rescaled by 1/(1-p)
    kept = Dp != 0
    np.testing.assert_allclose(Dp[kept], Wp[kept] / (1 - p), rtol=1e-6, atol=0)
    # drop rate
    n = Dp.size
    rate = 1.0 - kept.mean()
    assert abs(rate - p) <= 6 * math.sqrt(p * (1 - p) / n), (rate, p)
    # the mean is preserved (CLT bound derived above)
    S = D.sum() / (N * W.sum())
    sigma = math.sqrt(p / (1 - p) * (W[pos] ** 2).sum() / N) / W.sum()
    assert abs(S - 1.0) <= 6 * sigma, (S, sigma)


def test_core_attention_dropout_reference_path():
    g = torch.Generator().manual_seed(0)
    b, q, k, d = 4, 6, 7, 5
    Q = torch.randn(b, q, d, generator=g, dtype=torch.float64)
    K = torch.randn(b, k, d, generator=g, dtype=torch.float64)
    V = torch.eye(k, dtype=torch.float64).expand(b, k, k)
    allowed = np.ones((b, q, k), dtype=bool)
    allowed[1, :, 4:] = False  # padding
    allowed[2] = np.tril(np.ones((q, k), dtype=bool))  # causal-style
    W = softmax(scaled_dot(Q.numpy(), K.numpy()), allowed)
    mask = torch.from_numpy(allowed)
    draws = []
    for seed in range(DRAWS):
        torch.manual_seed(seed)
        out, w = attention(Q, K, V, mask=mask, dropout_p=P, need_weights=True)  # the explicit path
        np.testing.assert_allclose(w.numpy(), W, atol=1e-12)  # weights are returned before dropout
        draws.append(out.numpy())
    check_dropout(np.stack(draws), W, allowed, P)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_core_attention_dropout_fast_path(p):
    g = torch.Generator().manual_seed(1)
    b, h, q, k, d = 3, 2, 5, 8, 4
    Q = torch.randn(b, h, q, d, generator=g, dtype=torch.float64)
    K = torch.randn(b, h, k, d, generator=g, dtype=torch.float64)
    V = torch.eye(k, dtype=torch.float64).expand(b, h, k, k)
    allowed = np.ones((b, 1, 1, k), dtype=bool)
    allowed[0, ..., 6:] = False
    W = softmax(scaled_dot(Q.numpy(), K.numpy()), np.broadcast_to(allowed, (b, h, q, k)))
    draws = []
    for seed in range(DRAWS):
        torch.manual_seed(seed)
        out, _ = attention(Q, K, V, mask=torch.from_numpy(allowed), dropout_p=p)  # the fused path
        draws.append(out.numpy())
    check_dropout(np.stack(draws), W, allowed, p)


def test_multihead_attn_drop():
    """MultiHeadAttention with W_v = W_o = I: head h's slice of the output is its dropped weights."""
    b, q, k, heads = 3, 4, 6, 2
    dim = heads * k
    m = MultiHeadAttention(dim, heads, attn_drop=P).double()
    with torch.no_grad():
        wq, wk, wv = m.in_proj_weight.split([dim, dim, dim])
        wv.copy_(torch.eye(dim))
        m.out_proj.weight.copy_(torch.eye(dim))
    g = torch.Generator().manual_seed(2)
    x = torch.randn(b, q, dim, generator=g, dtype=torch.float64)
    mem = torch.randn(b, k, dim, generator=g, dtype=torch.float64)
    values = torch.cat([torch.eye(k, dtype=torch.float64)] * heads, -1).expand(b, k, dim)  # v_j = e_j per head
    allowed = np.ones((b, 1, 1, k), dtype=bool)
    allowed[1, ..., 3:] = False
    mask = torch.from_numpy(allowed)
    # the weights from the paper's formula with the module's projections
    pw = {n: t.detach().numpy() for n, t in m.projection_weights().items() if t is not None}
    Qh = (x.numpy() @ pw["w_q"].T + pw["b_q"]).reshape(b, q, heads, k).transpose(0, 2, 1, 3)
    Kh = (mem.numpy() @ pw["w_k"].T + pw["b_k"]).reshape(b, k, heads, k).transpose(0, 2, 1, 3)
    W = softmax(scaled_dot(Qh, Kh), np.broadcast_to(allowed, (b, heads, q, k)))
    m.eval()
    out_eval, w_eval = m(x, mem, values, mask=mask, need_weights=True)
    np.testing.assert_allclose(w_eval.detach().numpy(), W, atol=1e-12)
    m.train()
    draws = []
    with torch.no_grad():
        for seed in range(DRAWS):
            torch.manual_seed(seed)
            out, _ = m(x, mem, values, mask=mask)
            draws.append(out.numpy().reshape(b, q, heads, k).transpose(0, 2, 1, 3))
    check_dropout(np.stack(draws), W, allowed, P)


def test_block_sparse_dropout():
    b, h, n, d, block = 2, 2, 24, 4, 8
    g = torch.Generator().manual_seed(3)
    Q, K = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(2))
    V = torch.eye(n, dtype=torch.float64).expand(b, h, n, n)
    pattern = Window(5, 2)
    pad = torch.ones(b, n, dtype=torch.bool)
    pad[1, 18:] = False
    i = np.arange(n)
    band = (i[None, :] - i[:, None] >= -5) & (i[None, :] - i[:, None] <= 2)
    allowed = band[None, None] & pad.numpy()[:, None, None, :]
    W = softmax(scaled_dot(Q.numpy(), K.numpy()), np.broadcast_to(allowed, (b, h, n, n)))
    draws = []
    for seed in range(DRAWS):
        torch.manual_seed(seed)
        out, _ = block_sparse_attention(Q, K, V, pattern, block=block, mask=pad, dropout_p=P)
        draws.append(out.numpy())
    check_dropout(np.stack(draws), W, allowed, P)
    out0, _ = block_sparse_attention(Q, K, V, pattern, block=block, mask=pad)
    np.testing.assert_allclose(out0.numpy(), W, atol=1e-12)  # no dropout: the weights themselves
