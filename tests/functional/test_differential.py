"""Differential attention (Ye et al. 2024) against a float64 NumPy reference written from eqs. 1–3,
with the module's weights copied; gradients against a torch float64 reference; the contract."""

from __future__ import annotations

import math

import contract_modern as contract
import numpy as np
import pytest
import torch

from attnlab.functional.differential import differential_attention, lambda_init
from attnlab.nn import DifferentialAttention, create


def softmax(e, ok):
    e = np.where(ok, e, -np.inf)
    m = np.max(np.where(ok, e, -1e300), -1, keepdims=True)
    p = np.where(ok, np.exp(e - m), 0.0)
    s = p.sum(-1, keepdims=True)
    return np.where(s > 0, p / np.where(s > 0, s, 1), 0.0)


def module_reference(m: DifferentialAttention, x, ok):
    P = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    x = x.numpy()
    b, n, dim = x.shape
    h, d = m.num_heads, m.head_dim
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * 2)  # the module is built with depth=2, i.e. l = 3
    lam = math.exp(P["lambda_q1"] @ P["lambda_k1"]) - math.exp(P["lambda_q2"] @ P["lambda_k2"]) + lam_init
    Q, K, V = x @ P["q_proj.weight"].T, x @ P["k_proj.weight"].T, x @ P["v_proj.weight"].T
    heads = []
    for i in range(h):
        q1, q2 = Q[..., (2 * i) * d : (2 * i + 1) * d], Q[..., (2 * i + 1) * d : (2 * i + 2) * d]
        k1, k2 = K[..., (2 * i) * d : (2 * i + 1) * d], K[..., (2 * i + 1) * d : (2 * i + 2) * d]
        v = V[..., i * 2 * d : (i + 1) * 2 * d]
        a1 = softmax(q1 @ k1.transpose(0, 2, 1) / math.sqrt(d), ok)
        a2 = softmax(q2 @ k2.transpose(0, 2, 1) / math.sqrt(d), ok)
        o = (a1 - lam * a2) @ v  # (b, n, 2d)
        o = o / np.sqrt((o**2).mean(-1, keepdims=True) + 1e-5) * P["sub_norm.weight"]  # RMSNorm
        heads.append((1 - lam_init) * o)
    y = np.concatenate(heads, -1) @ P["out_proj.weight"].T + P["out_proj.bias"]
    return y, lam


def test_lambda_init_schedule():
    assert lambda_init(0) == pytest.approx(0.2)
    assert lambda_init(10) == pytest.approx(0.8 - 0.6 * math.exp(-3.0))


@pytest.mark.parametrize("causal", [False, True])
def test_module_against_numpy(causal):
    torch.manual_seed(0)
    m = DifferentialAttention(16, 2, depth=2).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pad = torch.ones(2, 6, dtype=torch.bool)
    pad[1, 4:] = False
    ok = pad[:, None, :].numpy()
    if causal:
        ok = ok & np.tril(np.ones((6, 6), dtype=bool))
    y, lam = module_reference(m, x, ok)
    got, w = m(x, mask=pad, causal=causal, need_weights=True)
    y = np.where(pad.numpy()[:, :, None], y, 0.0)  # padded tokens are no queries: zero output (the library's rule)
    np.testing.assert_allclose(got.detach().numpy(), y, rtol=1e-9, atol=1e-10)
    rows = w.sum(-1).detach().numpy()  # rows of A_1 − λA_2 sum to 1 − λ (padded queries: 0)
    per_head = np.reshape(1 - np.asarray(lam), (1, -1, 1))  # (1, h or 1, 1)
    np.testing.assert_allclose(rows, np.broadcast_to(per_head, rows.shape) * pad.numpy()[:, None, :], rtol=1e-9)
    fast, _ = m(x, mask=pad, causal=causal)
    torch.testing.assert_close(fast, got)


def test_gradients_against_torch_reference():
    torch.manual_seed(1)
    q1, k1, q2, k2, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(5))
    lam = torch.tensor(0.37, dtype=torch.float64, requires_grad=True)
    out, _ = differential_attention(q1, k1, q2, k2, v, lam, causal=True)
    c = torch.ones(5, 5, dtype=torch.bool).tril()

    def sm(q, k):
        return torch.softmax((q @ k.transpose(-1, -2) / 2.0).masked_fill(~c, float("-inf")), -1)

    ref = (sm(q1, k1) - lam * sm(q2, k2)) @ v
    g = torch.randn_like(out)
    ins = (q1, k1, q2, k2, v, lam)
    for a, b in zip(torch.autograd.grad((out * g).sum(), ins), torch.autograd.grad((ref * g).sum(), ins)):
        torch.testing.assert_close(a, b)


def test_contract():
    def fn(q, k, v, key_mask, need_weights):
        mask = None if key_mask is None else key_mask[:, None, :]
        return differential_attention(q, k, q.flip(-1), k.flip(-1), v, 0.5, mask=mask, need_weights=need_weights)

    contract.all_contracts(fn)
    m = create("differential", dim=16, num_heads=2)
    x = torch.randn(1, 0, 16)
    assert m(x)[0].shape == (1, 0, 16)
