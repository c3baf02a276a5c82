"""LuongAttention (dot, general, concat; scaled or not) against float64 NumPy references."""

import numpy as np
import pytest
import torch

import attnlab
from attnlab.kernels.chunked_additive import DEFAULT_MAX_ELEMS
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


# LuongAttention: defaults, parameter shapes and initialisation, every message, ``precompute`` and
# ``projected_keys`` for each score, the scale, ``kv_finite``, against float64 NumPy written from
# Luong et al. 2015 §3.1 eq. 8 (dot, general, concat) with the module's weights copied.
def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def np_batched_scores(m, q, k):
    """q (b, q, d_q), k (b, k, d_k) → e (b, q, k), the paper's eq. 8 (÷ √d_k when scaled)."""
    q, k = q.numpy(), k.numpy()
    if m.score == "dot":
        e = np.einsum("bqd,bkd->bqk", q, k)
    elif m.score == "general":
        W = m.weight.weight.detach().numpy()  # (d_q, d_k)
        e = np.einsum("bqd,de,bke->bqk", q, W, k)
    else:
        W, v = m.weight.weight.detach().numpy(), m.v.detach().numpy()
        e = np.zeros((q.shape[0], q.shape[1], k.shape[1]))
        for b in range(q.shape[0]):
            for i in range(q.shape[1]):
                for j in range(k.shape[1]):
                    e[b, i, j] = v @ np.tanh(W @ np.concatenate([q[b, i], k[b, j]]))
    return e / np.sqrt(k.shape[-1]) if m.scale else e


def np_attend(e, vals, ok=None):
    if ok is not None:
        e = np.where(ok, e, -np.inf)
    w = np.exp(e - e.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ vals, w


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_defaults_general_unscaled():
    m = LuongAttention(3, 5)
    assert m.score == "general" and m.scale is False and m.max_elems == DEFAULT_MAX_ELEMS
    assert m.weight.weight.shape == (3, 5) and m.weight.bias is None
    assert not hasattr(m, "v")
    assert m.extra_repr() == "query_dim=3, key_dim=5, score='general', scale=False"


def test_concat_parameters_and_their_initialisation():
    torch.manual_seed(0)
    m = LuongAttention(3, 5, score="concat")
    assert m.attn_dim == 3  # defaults to query_dim
    assert m.weight.weight.shape == (3, 8) and m.weight.bias is None and m.v.shape == (3,)
    big = LuongAttention(4, 2, score="concat", attn_dim=400)
    assert big.attn_dim == 400 and big.weight.weight.shape == (400, 6)
    bound = 400**-0.5  # v ~ U(−1/√d_a, 1/√d_a)
    assert big.v.abs().max() <= bound and big.v.abs().max() > 0.9 * bound
    assert big.v.min() < -0.5 * bound and big.v.max() > 0.5 * bound
    assert big.extra_repr() == "query_dim=4, key_dim=2, score='concat', scale=False"
    assert LuongAttention(4, 4, score="dot", scale=True).extra_repr() == "query_dim=4, key_dim=4, score='dot', scale=True"
    assert list(LuongAttention(4, 4, score="dot").parameters()) == []


def test_messages_in_full():
    assert message(lambda: LuongAttention(3, 4, score="bilinear")) == (
        "score must be one of ('dot', 'general', 'concat'); got 'bilinear'")
    assert message(lambda: LuongAttention(3, 4, score="dot")) == (
        "the dot score needs query_dim == key_dim; got 3 and 4 (use score='general')")
    assert message(lambda: LuongAttention(3, 4, score="concat", scale=True)) == (
        "scale applies to the dot and general scores, not concat")
    LuongAttention(3, 4, score="concat", scale=False)
    LuongAttention(3, 4, score="general", scale=True)
    m = LuongAttention(3, 4)
    assert message(lambda: m(t(2, 4), t(2, 5, 4))) == (
        "expected query (..., 3) and keys (b, k, 4); got query (2, 1, 4) and keys (2, 5, 4)")
    assert message(lambda: m(t(2, 3), t(2, 5, 3))) == (
        "expected query (..., 3) and keys (b, k, 4); got query (2, 1, 3) and keys (2, 5, 3)")


CASES = [("dot", False, 4, 4), ("dot", True, 4, 4), ("general", False, 3, 5), ("general", True, 3, 5), ("concat", False, 3, 5)]


@pytest.mark.parametrize("score,scale,dq,dk", CASES)
def test_precompute_is_the_keys_part_of_the_score(score, scale, dq, dk):
    torch.manual_seed(1)
    m = LuongAttention(dq, dk, score=score, scale=scale, attn_dim=6).double()
    k = t(2, 4, dk, seed=1)
    ok = torch.tensor([[True, True, False, True], [True, True, True, True]])
    k[0, 2] = float("nan")
    pk = m.precompute(k, ok)
    kz = np.where(ok.numpy()[..., None], np.nan_to_num(k.numpy()), 0.0)
    if score == "dot":
        ref = kz
    elif score == "general":
        ref = kz @ m.weight.weight.detach().numpy().T  # W_a h̄: (b, k, d_q)
    else:
        ref = kz @ m.weight.weight.detach().numpy()[:, dq:].T  # the key half of W_a: (b, k, d_a)
    np.testing.assert_allclose(pk.detach().numpy(), ref, atol=1e-13)


@pytest.mark.parametrize("score,scale,dq,dk", CASES)
@pytest.mark.parametrize("traced", [False, True])
def test_projected_keys_give_the_papers_numbers(score, scale, dq, dk, traced):
    torch.manual_seed(2)
    m = LuongAttention(dq, dk, score=score, scale=scale, attn_dim=6, max_elems=7).double()
    q, k, v = t(2, 3, dq, seed=2), t(2, 4, dk, seed=3), t(2, 4, 2, seed=4)
    ok = torch.tensor([[True, True, False, True], [False, True, True, True]])
    ref_c, ref_w = np_attend(np_batched_scores(m, q, k), v.numpy(), ok.numpy()[:, None, :])
    if traced:
        with attnlab.trace() as tr:
            c, w = m(q, k, v, mask=ok, projected_keys=m.precompute(k, ok), need_weights=True)
        assert "scores" in tr and "weights" in tr
    else:
        c, w = m(q, k, v, mask=ok, projected_keys=m.precompute(k, ok), need_weights=True)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=1e-12)
    np.testing.assert_allclose(c.detach().numpy(), ref_c, atol=1e-12)


@pytest.mark.parametrize("score,scale,dq,dk", CASES)
def test_projected_keys_are_used_as_given(score, scale, dq, dk):
    """Outside a trace the module trusts ``projected_keys``: zero projected keys give uniform weights
    (for concat: vᵀ tanh(W_q s), the same for every key)."""
    torch.manual_seed(3)
    m = LuongAttention(dq, dk, score=score, scale=scale, attn_dim=6).double()
    q, k = t(2, 3, dq, seed=5), t(2, 4, dk, seed=6)
    width = {"dot": dk, "general": dq, "concat": 6}[score]
    _, w = m(q, k, projected_keys=torch.zeros(2, 4, width, dtype=torch.float64), need_weights=True)
    torch.testing.assert_close(w, torch.full((2, 3, 4), 0.25, dtype=torch.float64))
    with attnlab.trace():  # while tracing, the readable reference reads the raw keys instead
        _, w_traced = m(q, k, projected_keys=torch.zeros(2, 4, width, dtype=torch.float64), need_weights=True)
    np.testing.assert_allclose(w_traced.detach().numpy(), np_attend(np_batched_scores(m, q, k), k.numpy())[1], atol=1e-12)
    bad = torch.zeros(2, 4, width + 1, dtype=torch.float64)
    assert message(lambda: m(q, k, projected_keys=bad)) == (
        f"projected_keys must be (b, k, d) = (2, 4, {width}) (precompute(keys) of these keys); got (2, 4, {width + 1})")


@pytest.mark.parametrize("score,scale,dq,dk", CASES)
def test_raw_keys_single_step_and_need_weights(score, scale, dq, dk):
    torch.manual_seed(4)
    m = LuongAttention(dq, dk, score=score, scale=scale, attn_dim=5, max_elems=3).double()
    q, k = t(3, dq, seed=7), t(3, 6, dk, seed=8)
    ref_c, ref_w = np_attend(np_batched_scores(m, q[:, None], k), k.numpy())
    c, w = m(q, k, need_weights=True)
    np.testing.assert_allclose(w.detach().numpy(), ref_w[:, 0], atol=1e-12)
    np.testing.assert_allclose(c.detach().numpy(), ref_c[:, 0], atol=1e-12)
    c2, w2 = m(q, k, need_weights=False)
    assert w2 is None
    torch.testing.assert_close(c2, c)


def test_scale_divides_by_the_key_width_not_the_query_width():
    torch.manual_seed(5)
    m = LuongAttention(2, 8, score="general", scale=True).double()
    q, k = t(1, 2, seed=9), t(1, 3, 8, seed=10)
    W = m.weight.weight.detach().numpy()
    e = np.einsum("bd,de,bke->bk", q.numpy(), W, k.numpy()) / np.sqrt(8)
    for traced in (False, True):
        with _maybe_trace(traced):
            _, w = m(q, k, need_weights=True)
        np.testing.assert_allclose(w.detach().numpy(), np_attend(e, k.numpy())[1], atol=1e-12)


def _maybe_trace(on):
    import contextlib

    return attnlab.trace() if on else contextlib.nullcontext()


@pytest.mark.parametrize("score,dq,dk", [("dot", 3, 3), ("general", 3, 4), ("concat", 3, 4)])
@pytest.mark.parametrize("projected", [False, True])
def test_kv_finite_reaches_the_core(score, dq, dk, projected):
    """``kv_finite=True`` is the caller's word that masked keys/values are finite; the core then skips
    its pass, so a NaN planted in a masked value shows (0 · NaN); without the flag it cannot."""
    torch.manual_seed(6)
    m = LuongAttention(dq, dk, score=score).double()
    q, k, v = t(2, dq, seed=11), t(2, 3, dk, seed=12), t(2, 3, 2, seed=13)
    v[:, 2] = float("nan")
    ok = torch.tensor([[True, True, False]] * 2)
    kw = {"projected_keys": m.precompute(k, ok)} if projected else {}
    assert torch.isfinite(m(q, k, v, mask=ok, **kw)[0]).all()
    assert torch.isnan(m(q, k, v, mask=ok, kv_finite=True, **kw)[0]).all()


def test_concat_score_gradients_equal_the_readable_reference():
    torch.manual_seed(7)
    m = LuongAttention(3, 4, score="concat", attn_dim=5, max_elems=4).double()
    q = t(2, 3, 3, seed=14).requires_grad_()
    k = t(2, 5, 4, seed=15).requires_grad_()
    c, _ = m(q, k)
    g = torch.autograd.grad(c.square().sum(), (q, k, m.weight.weight, m.v))
    with attnlab.trace():
        c_ref, _ = m(q, k)
    g_ref = torch.autograd.grad(c_ref.square().sum(), (q, k, m.weight.weight, m.v))
    torch.testing.assert_close(c, c_ref)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("projected", [False, True])
def test_the_concat_scores_memory_budget_reaches_the_kernel(projected):
    """``max_elems`` bounds the chunked kernel's blocks; the module passes its own, so a budget of 0 is refused."""
    m = LuongAttention(3, 3, score="concat").double()
    m.max_elems = 0  # past the constructor's own check: the forward hands the module's budget to the kernel
    q, k = t(2, 3, seed=16), t(2, 4, 3, seed=17)
    kw = {"projected_keys": m.precompute(k)} if projected else {}
    assert message(lambda: m(q, k, **kw)) == "max_elems must be >= 1; got 0"
