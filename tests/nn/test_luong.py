"""LuongAttention (dot, general, concat; scaled or not) against float64 NumPy references."""

import numpy as np
import pytest
import torch

import attnlab
from attnlab.nn import AttentionalOutput, LuongAttention


def np_scores(score, q, k, m, scale):
    """q (q, d_q), k (k, d_k) → (q, k) with the module's parameters read as plain arrays."""
    if score == "dot":
        e = q @ k.T
    elif score == "general":
        W = m.weight.weight.detach().numpy()  # (d_q, d_k)
        e = np.array([[qi @ W @ kj for kj in k] for qi in q])
    else:
        W, v = m.weight.weight.detach().numpy(), m.v.detach().numpy()
        e = np.array([[v @ np.tanh(W @ np.concatenate([qi, kj])) for kj in k] for qi in q])
    return e / np.sqrt(k.shape[1]) if scale else e


def np_softmax(e, ok):
    out = np.zeros_like(e)
    for i in range(e.shape[0]):
        if ok[i].any():
            x = np.where(ok[i], np.exp(e[i] - e[i][ok[i]].max()), 0.0)
            out[i] = x / x.sum()
    return out


@pytest.mark.parametrize("score,scale", [("dot", False), ("dot", True), ("general", False), ("general", True), ("concat", False)])
@pytest.mark.parametrize("traced", [False, True])
def test_matches_numpy(score, scale, traced):
    torch.manual_seed(0)
    dq, dk = (4, 4) if score == "dot" else (3, 5)
    m = LuongAttention(dq, dk, score=score, scale=scale, attn_dim=6).double()
    q = torch.randn(2, 3, dq, dtype=torch.float64)
    k = torch.randn(2, 6, dk, dtype=torch.float64)
    val = torch.randn(2, 6, 2, dtype=torch.float64)
    mask = torch.rand(2, 3, 6) > 0.3
    mask[0, 2] = False
    if traced:
        with attnlab.trace() as t:
            ctx, w = m(q, k, val, mask=mask, need_weights=True)
        assert "scores" in t and "weights" in t
    else:
        ctx, w = m(q, k, val, mask=mask, need_weights=True)
    for n in range(2):
        e = np_scores(score, q[n].numpy(), k[n].numpy(), m, scale)
        ref_w = np_softmax(e, mask[n].numpy())
        np.testing.assert_allclose(w[n].detach().numpy(), ref_w, atol=1e-12)
        np.testing.assert_allclose(ctx[n].detach().numpy(), ref_w @ val[n].numpy(), atol=1e-12)
    assert torch.all(w[0, 2] == 0) and torch.all(ctx[0, 2] == 0)


@pytest.mark.parametrize("name", ["luong-dot", "luong-general", "luong-concat"])
def test_registry_precompute_and_padding_mask(name):
    m = attnlab.create(name, query_dim=4, key_dim=4)
    assert isinstance(m, LuongAttention) and m.score == name.split("-")[1]
    q, k = torch.randn(3, 4), torch.randn(3, 5, 4)
    pad = attnlab.masks.padding([5, 2, 4])  # (b, k)
    c1, w1 = m(q, k, mask=pad, need_weights=True)
    c2, _ = m(q, k, mask=pad, projected_keys=m.precompute(k), need_weights=False)
    torch.testing.assert_close(c1, c2)
    assert torch.all(w1[1, 2:] == 0)
    torch.testing.assert_close(w1.sum(-1), torch.ones(3))


def test_finite_gradients_with_a_fully_masked_row():
    m = LuongAttention(3, 3, score="concat")
    q = torch.randn(1, 2, 3, requires_grad=True)
    k = torch.randn(1, 4, 3, requires_grad=True)
    mask = torch.tensor([[[True, False, True, True], [False] * 4]])
    ctx, _ = m(q, k, mask=mask)
    ctx.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        LuongAttention(3, 4, score="dot")
    with pytest.raises(ValueError, match="score must be"):
        LuongAttention(3, 4, score="bilinear")
    m = LuongAttention(3, 4, score="general")
    with pytest.raises(ValueError, match="expected query"):
        m(torch.randn(2, 4), torch.randn(2, 5, 4))


def test_attentional_output_matches_formula():
    torch.manual_seed(0)
    layer = AttentionalOutput(3, 2, 4, 5).double()
    c, s = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 2, dtype=torch.float64)
    h, logits = layer(c, s)
    Wc, bc = layer.combine.weight.detach().numpy(), layer.combine.bias.detach().numpy()
    Ws, bs = layer.predict.weight.detach().numpy(), layer.predict.bias.detach().numpy()
    ref_h = np.tanh(np.concatenate([c.numpy(), s.numpy()], 1) @ Wc.T + bc)
    np.testing.assert_allclose(h.detach().numpy(), ref_h, atol=1e-12)
    np.testing.assert_allclose(logits.detach().numpy(), ref_h @ Ws.T + bs, atol=1e-12)
