"""DIN's target attention and SASRec's block against float64 NumPy written here (copied weights),
SASRec's causal property, and the padding cases of both."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.nn import SASRec, SASRecBlock, TargetAttention

D = 6


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def _din_scores(m: TargetAttention, cand: np.ndarray, hist: np.ndarray) -> np.ndarray:
    """a_j = w2 · PReLU(W1 [e_j, v, e_j − v, e_j ⊙ v] + b1) + b2, one user and one history item at a time."""
    w1, b1 = _np(m.unit[0].weight), _np(m.unit[0].bias)
    alpha = _np(m.unit[1].weight)[0]
    w2, b2 = _np(m.unit[2].weight)[0], _np(m.unit[2].bias)[0]
    out = np.zeros(hist.shape[:2])
    for u in range(hist.shape[0]):
        for j in range(hist.shape[1]):
            e, v = hist[u, j], cand[u]
            z = w1 @ np.concatenate([e, v, e - v, e * v]) + b1
            out[u, j] = w2 @ np.where(z > 0, z, alpha * z) + b2
    return out


def _target_case(normalise):
    torch.manual_seed(0)
    m = TargetAttention(D, hidden_dim=7, normalise=normalise).double()
    with torch.no_grad():
        m.unit[1].weight.fill_(0.3)  # PReLU's slope: a value where negative inputs matter
    cand, hist = torch.randn(3, D, dtype=torch.float64), torch.randn(3, 5, D, dtype=torch.float64)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False], [False, True, False, True, True]])
    return m, cand, hist, mask


def test_target_attention_softmax_matches_numpy():
    m, cand, hist, mask = _target_case("softmax")
    pooled, w = m(cand, hist, mask=mask, need_weights=True)
    a = _din_scores(m, _np(cand), _np(hist))
    allowed = mask.numpy()
    e = np.where(allowed, np.exp(a - a.max(-1, keepdims=True)), 0.0)
    want_w = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(_np(w), want_w, atol=1e-12)
    np.testing.assert_allclose(_np(pooled), np.einsum("bn,bnd->bd", want_w, _np(hist)), atol=1e-12)
    fast, none = m(cand, hist, mask=mask)  # the fast call returns the same pooled vector, no weights
    assert none is None
    torch.testing.assert_close(fast, pooled, atol=1e-12, rtol=0)


def test_target_attention_none_is_dins_sum_pooling():
    m, cand, hist, mask = _target_case("none")
    pooled, w = m(cand, hist, mask=mask, need_weights=True)
    want_w = np.where(mask.numpy(), _din_scores(m, _np(cand), _np(hist)), 0.0)
    np.testing.assert_allclose(_np(w), want_w, atol=1e-12)
    np.testing.assert_allclose(_np(pooled), np.einsum("bn,bnd->bd", want_w, _np(hist)), atol=1e-12)
    assert not np.allclose(want_w.sum(-1), 1.0)  # raw scores: no softmax


@pytest.mark.parametrize("normalise", ["softmax", "none"])
def test_target_attention_padding_contract(normalise):
    m, cand, hist, mask = _target_case(normalise)
    mask[1] = False  # user 1 has no history
    poisoned = hist.clone()
    poisoned[~mask] = float("nan")
    poisoned.requires_grad_(True)
    pooled, w = m(cand, poisoned, mask=mask, need_weights=True)
    assert torch.equal(pooled[1], torch.zeros(D, dtype=torch.float64)) and torch.equal(w[1], torch.zeros(5, dtype=torch.float64))
    clean, _ = m(cand, torch.where(mask[..., None], hist, 0.0), mask=mask)
    torch.testing.assert_close(pooled, clean, atol=1e-12, rtol=0)
    pooled.sum().backward()
    assert torch.isfinite(poisoned.grad).all() and torch.equal(poisoned.grad[~mask], torch.zeros_like(poisoned.grad[~mask]))
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


def test_target_attention_rejects_bad_calls():
    m = TargetAttention(D)
    with pytest.raises(ValueError, match=r"candidate must be \(b, d\).*got candidate \(2, 6\), history \(2, 4, 5\)"):
        m(torch.randn(2, D), torch.randn(2, 4, 5))
    with pytest.raises(ValueError, match=r"mask must be a \(b, n\) = \(2, 4\) bool.*got \(2, 3\)"):
        m(torch.randn(2, D), torch.randn(2, 4, D), mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="normalise must be one of"):
        TargetAttention(D, normalise="sum")
    assert isinstance(attnlab.create("target-attention", dim=D), TargetAttention)


# ---- SASRec ------------------------------------------------------------------------------------

def _layer_norm(x, w, b, eps=1e-5):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _np_block(m: SASRecBlock, x: np.ndarray, real: np.ndarray) -> np.ndarray:
    """One block, one user at a time: S = x + MHA(LN(x)) (causal, padding masked), F = S + FFN(LN(S))."""
    p = {k: (None if v is None else _np(v)) for k, v in m.attn.projection_weights().items()}
    wo, bo = _np(m.attn.out_proj.weight), _np(m.attn.out_proj.bias)
    h, n = m.attn.num_heads, x.shape[1]
    dh = x.shape[-1] // h
    out = np.zeros_like(x)
    for u in range(x.shape[0]):
        xu = np.where(real[u][:, None], x[u], 0.0)
        y = _layer_norm(xu, _np(m.norm1.weight), _np(m.norm1.bias))
        q, k, v = (y @ p["w_" + s].T + p["b_" + s] for s in "qkv")
        heads = []
        for i in range(h):
            sl = slice(i * dh, (i + 1) * dh)
            e = q[:, sl] @ k[:, sl].T / np.sqrt(dh)
            allowed = np.tril(np.ones((n, n), dtype=bool)) & real[u][None, :]
            a = np.where(allowed, np.exp(np.where(allowed, e, -np.inf) - np.where(allowed, e, -np.inf).max(-1, keepdims=True, initial=-1e300)), 0.0)
            a = a / np.maximum(a.sum(-1, keepdims=True), 1e-300)
            heads.append(a @ v[:, sl])
        s = xu + (np.concatenate(heads, -1) @ wo.T + bo) * real[u][:, None]
        z = _layer_norm(s, _np(m.norm2.weight), _np(m.norm2.bias))
        f = s + np.maximum(z @ _np(m.ffn[0].weight).T + _np(m.ffn[0].bias), 0) @ _np(m.ffn[2].weight).T + _np(m.ffn[2].bias)
        out[u] = np.where(real[u][:, None], f, 0.0)
    return out


def test_sasrec_block_matches_numpy():
    torch.manual_seed(0)
    m = SASRecBlock(D, 2).double().eval()
    with torch.no_grad():
        for prm in m.parameters():
            prm.add_(0.1 * torch.randn_like(prm))
    x = torch.randn(2, 5, D, dtype=torch.float64)
    mask = torch.tensor([[False, False, True, True, True], [True] * 5])  # SASRec pads on the left
    out, _ = m(x, mask=mask)
    np.testing.assert_allclose(_np(out), _np_block(m, _np(x), mask.numpy()), atol=1e-10)


def test_sasrec_is_causal_and_padding_gives_zeros():
    torch.manual_seed(0)
    model = SASRec(num_items=20, dim=8, max_len=6, num_layers=2, num_heads=2).double().eval()
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    base = model(items)
    for t in range(2, 6):
        changed = items.clone()
        changed[:, t] = 17
        after = model(changed)
        torch.testing.assert_close(after[:, :t], base[:, :t], atol=0, rtol=0)
        assert not torch.allclose(after[:, t], base[:, t])
    assert torch.equal(base[0, :2], torch.zeros(2, 8, dtype=torch.float64))
    scores = model.score(base[:, -1], torch.tensor([[6, 7], [1, 2]]))  # r = F · M_i
    want = (base[:, -1, None, :] * model.item_embedding(torch.tensor([[6, 7], [1, 2]]))).sum(-1)
    torch.testing.assert_close(scores, want)


def test_sasrec_rejects_bad_items():
    model = SASRec(num_items=5, dim=4, max_len=3)
    with pytest.raises(ValueError, match=r"item ids must be in \[0, 5\].*got \[0, 9\]"):
        model(torch.tensor([[0, 9]]))
    with pytest.raises(ValueError, match=r"n ≤ max_len = 3"):
        model(torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor of item ids"):
        model(torch.ones(1, 2))
