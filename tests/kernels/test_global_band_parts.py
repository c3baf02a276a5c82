"""Kernels: the fused parts of ``block_sparse_attention`` (global tokens, window spans) with key padding.

Reference: masked softmax attention and its gradients in float64 NumPy, written here from the
equations (S = scale·QKᵀ on allowed pairs, P = softmax over them, 0 on a row with none, O = PV;
dV = PᵀdO, dS = P∘(dO Vᵀ − rowsum(P∘dO Vᵀ)), dQ = scale·dS K, dK = scale·dSᵀQ), with the
allowed pairs from a Python loop over the pattern's rule written by hand.
"""

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention


def np_attention_and_grads(q, k, v, allow, scale, dout):
    """q, k, v, dout (b, h, n, d) float64; allow (b, n, n) bool → out, dq, dk, dv."""
    s = scale * q @ np.swapaxes(k, -1, -2)
    a = allow[:, None]
    s = np.where(a, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(a, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    out = p @ v
    dv = np.swapaxes(p, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    return out, scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv


def rule_mask(rule, n, real):
    """(b, n, n): rule(i, j) for each pair, and key j real."""
    b = real.shape[0]
    allow = np.zeros((b, n, n), dtype=bool)
    for bi in range(b):
        for i in range(n):
            for j in range(n):
                allow[bi, i, j] = bool(rule(i, j)) and bool(real[bi, j])
    return allow


N = 11
GLOBAL = (0, 5)
CASES = {
    # name: (pattern, rule written by hand)
    "globals_alone": (lambda: P.global_tokens(list(GLOBAL)), lambda i, j: i in GLOBAL or j in GLOBAL),
    "window_and_globals": (
        lambda: P.sliding_window(1, 2) | P.global_tokens(list(GLOBAL)),
        lambda i, j: -1 <= j - i <= 2 or i in GLOBAL or j in GLOBAL,
    ),
    "every_position_global": (lambda: P.global_tokens(range(N)), lambda i, j: True),
    "globals_and_strided": (
        lambda: P.global_tokens(list(GLOBAL)) | P.strided(4),
        lambda i, j: i in GLOBAL or j in GLOBAL or abs(i - j) < 4 or (i - j) % 4 == 0,
    ),
    "window_alone": (lambda: P.sliding_window(2, 1), lambda i, j: -2 <= j - i <= 1),
}


def padding():
    real = np.ones((3, N), dtype=bool)
    real[0, N - 2 :] = False  # a shorter sequence
    real[1, list(GLOBAL)] = False  # the global keys padded: the other rows have no key in the global part
    real[2] = False  # every key padded: every row has no key anywhere
    return real


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_fused_parts_equal_numpy_outputs_and_gradients(name, padded):
    make, rule = CASES[name]
    g = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(3, 2, N, 3, dtype=torch.float64, generator=g) for _ in range(4))
    real = padding() if padded else np.ones((3, N), dtype=bool)
    scale = 0.6
    want = np_attention_and_grads(q.numpy(), k.numpy(), v.numpy(), rule_mask(rule, N, real), scale, dout.numpy())
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, _ = block_sparse_attention(
        q, k, v, make(), block=4, scale=scale, key_padding_mask=torch.from_numpy(real) if padded else None
    )
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    for name_, a, w in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a.detach().numpy(), w, atol=1e-12, rtol=0, err_msg=name_)
