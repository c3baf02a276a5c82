"""AdditiveAttention (Bahdanau) and the chunked additive kernel against float64 NumPy references."""

import contextlib

import numpy as np
import pytest
import torch

import attnlab
from attnlab.kernels.chunked_additive import DEFAULT_MAX_ELEMS, chunked_additive_scores
from attnlab.nn import AdditiveAttention


def np_additive(q, k, v_vals, wq, wk, v, mask):
    """Float64 loop: e_ij = vᵀ tanh(Wq q_i + Wk k_j), masked softmax (zero rows when fully masked), context."""
    b, nq, _ = q.shape
    nk = k.shape[1]
    w = np.zeros((b, nq, nk))
    for n in range(b):
        for i in range(nq):
            e = np.array([v @ np.tanh(wq @ q[n, i] + wk @ k[n, j]) for j in range(nk)])
            ok = mask[n, i] if mask is not None else np.ones(nk, bool)
            if ok.any():
                ex = np.where(ok, np.exp(e - e[ok].max()), 0.0)
                w[n, i] = ex / ex.sum()
    return w @ v_vals, w


def _module(dq, dk, da, impl="chunked", **kw):
    torch.manual_seed(1)
    return AdditiveAttention(dq, dk, da, impl=impl, **kw).double()


def _params(m):
    return m.w_q.weight.detach().numpy(), m.w_k.weight.detach().numpy(), m.v.detach().numpy()


@pytest.mark.parametrize("impl", ["chunked", "reference"])
@pytest.mark.parametrize("mask_kind", ["none", "bk", "bqk"])
def test_matches_numpy(impl, mask_kind):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    k = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    val = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    mask = None
    if mask_kind == "bk":
        mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    elif mask_kind == "bqk":
        mask = torch.rand(2, 3, 5, generator=g) > 0.4
        mask[1, 2] = False  # one fully masked row
    m = _module(4, 6, 8, impl, max_elems=40)  # tiny budget: several chunks
    ctx, w = m(q, k, val, mask=mask, need_weights=True)
    np_mask = None if mask is None else np.broadcast_to((mask if mask.dim() == 3 else mask[:, None]).numpy(), (2, 3, 5))
    ref_ctx, ref_w = np_additive(q.numpy(), k.numpy(), val.numpy(), *_params(m), np_mask)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, atol=1e-12)
    np.testing.assert_allclose(ctx.detach().numpy(), ref_ctx, atol=1e-12)


def test_single_step_query_and_keys_as_values():
    m = _module(3, 3, 4)
    q, k = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, 3, dtype=torch.float64)
    ctx, w = m(q, k, mask=torch.tensor([[True, True, True, False]] * 2), need_weights=True)
    assert ctx.shape == (2, 3) and w.shape == (2, 4)
    np_mask = np.array([[[True, True, True, False]]] * 2)
    ref_ctx, ref_w = np_additive(q[:, None].numpy(), k.numpy(), k.numpy(), *_params(m), np_mask)
    np.testing.assert_allclose(w.detach().numpy(), ref_w[:, 0], atol=1e-12)
    np.testing.assert_allclose(ctx.detach().numpy(), ref_ctx[:, 0], atol=1e-12)


def test_seed_example_through_the_module():
    """The first tutorial's three-word example with its parameters loaded (true values; the text's 1.32 is wrong)."""
    m = AdditiveAttention(2, 2, 2)
    with torch.no_grad():
        m.w_q.weight.copy_(torch.tensor([[0.1, 0.2], [0.3, 0.4]]))
        m.w_k.weight.copy_(torch.tensor([[0.5, 0.6], [0.7, 0.8]]))
        m.v.copy_(torch.tensor([1.0, 2.0]))
    h = torch.tensor([[[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]]])
    s = torch.tensor([[0.6, -0.2]])
    ctx, w = m(s, h, need_weights=True)
    u1 = np.tanh(np.array([0.02, 0.10]) + np.array([0.40, 0.54]))  # the tutorial's step 1, by hand
    assert abs(float(np.array([1.0, 2.0]) @ u1) - 1.5267) < 1e-4
    torch.testing.assert_close(w, torch.tensor([[0.4771, 0.2731, 0.2498]]), atol=1e-4, rtol=0)
    torch.testing.assert_close(ctx, torch.tensor([[0.1524, 0.3658]]), atol=1e-4, rtol=0)
    with attnlab.trace() as t:
        ctx2, _ = m(s, h)
    torch.testing.assert_close(t["scores"].value, torch.tensor([[[1.5267, 0.9687, 0.8797]]]), atol=1e-4, rtol=0)
    torch.testing.assert_close(ctx2, ctx)


@pytest.mark.parametrize("chunk", [1, 2, 5])
def test_chunked_kernel_equals_reference_scores_and_grads(chunk):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    wq = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    wk = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    ref = attnlab.scores.additive(q, k, wq, wk, v)
    out = chunked_additive_scores(q @ wq.T, k @ wk.T, v, chunk=chunk)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    up = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    g_ref = torch.autograd.grad((ref * up).sum(), (q, k, wq, wk, v))
    g_out = torch.autograd.grad((out * up).sum(), (q, k, wq, wk, v))
    for a, b in zip(g_out, g_ref):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def test_chunked_kernel_gradcheck():
    g = torch.Generator().manual_seed(4)
    a = torch.randn(2, 3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, v: chunked_additive_scores(a, b, v, chunk=2), (a, b, v))
    b1 = b[:1].detach().requires_grad_()  # broadcast keys over the batch
    assert torch.autograd.gradcheck(lambda a, b, v: chunked_additive_scores(a, b, v, chunk=1), (a, b1, v))


def test_fully_masked_row_zero_output_finite_grads():
    m = _module(3, 3, 4)
    q = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 2, 4, dtype=torch.bool)
    mask[0, 1] = False
    ctx, w = m(q, k, mask=mask, need_weights=True)
    assert torch.all(w[0, 1] == 0) and torch.all(ctx[0, 1] == 0)
    ctx.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()
    assert torch.all(q.grad[0, 1] == 0)


def test_precomputed_keys_and_need_weights():
    m = _module(3, 5, 4)
    q, k = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 6, 5, dtype=torch.float64)
    pk = m.precompute(k)
    c1, w1 = m(q, k, need_weights=True)
    c2, w2 = m(q, k, projected_keys=pk, need_weights=False)
    assert w2 is None
    torch.testing.assert_close(c1, c2)
    with pytest.raises(ValueError, match="projected_keys"):
        m(q, k, projected_keys=pk[:, :, :2])


def test_bad_input_and_registry():
    m = attnlab.create("bahdanau", query_dim=3, key_dim=5, attn_dim=4)
    assert isinstance(m, AdditiveAttention)
    with pytest.raises(ValueError, match="batch"):
        m(torch.randn(2, 3), torch.randn(3, 4, 5))
    with pytest.raises(ValueError, match="mask"):
        m(torch.randn(2, 3), torch.randn(2, 4, 5), mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_dim"):
        AdditiveAttention(3, 5, 0)


@pytest.mark.parametrize("chunk", [2, 5])  # several blocks / one block (kept from the forward, not recomputed)
@pytest.mark.parametrize("wanted", ["abv", "a", "b", "v"])
def test_chunked_kernel_partial_grads_and_retain_graph(chunk, wanted):
    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 5, 4, generator=g, dtype=torch.float64, requires_grad="a" in wanted)
    b = torch.randn(2, 3, 4, generator=g, dtype=torch.float64, requires_grad="b" in wanted)
    v = torch.randn(4, generator=g, dtype=torch.float64, requires_grad="v" in wanted)
    up = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    inputs = [t for t in (a, b, v) if t.requires_grad]
    ref = torch.autograd.grad(((torch.tanh(a[:, :, None] + b[:, None]) @ v) * up).sum(), inputs)
    loss = (chunked_additive_scores(a, b, v, chunk=chunk) * up).sum()
    first = torch.autograd.grad(loss, inputs, retain_graph=True)
    second = torch.autograd.grad(loss, inputs)  # the kept block was consumed: recomputed
    for r, x, y in zip(ref, first, second):
        torch.testing.assert_close(x, r, atol=1e-12, rtol=0)
        torch.testing.assert_close(y, r, atol=1e-12, rtol=0)


def test_chunk_budget_quarter_of_the_whole_tensor():
    from attnlab.kernels.chunked_additive import DEFAULT_MAX_ELEMS, _chunk

    b, q, k, d_a = 32, 200, 200, 256
    c = _chunk(b, q, k, d_a, None, DEFAULT_MAX_ELEMS)
    assert 1 <= c and c * b * k * d_a <= min(DEFAULT_MAX_ELEMS, b * q * k * d_a // 4)
    assert _chunk(4, 10, 10, 8, None, DEFAULT_MAX_ELEMS) == 10  # small: one block
    assert _chunk(1, 10, 1, 1, None, 3) == 3  # budget 3 → blocks of 3 (4 blocks, evened: ceil(10/4) = 3)
    with pytest.raises(ValueError, match="chunk"):
        _chunk(1, 10, 1, 1, 0, 3)


# AdditiveAttention (Bahdanau): defaults, argument messages, initialisation, every path (chunked,
# reference, traced, projected keys) and ``kv_finite``, against float64 NumPy written from
# Bahdanau et al. 2015 appendix A.1.2 (e_j = v_aᵀ tanh(W_a s + U_a h_j)) with the module's weights.
def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def np_reference(m, q, k, vals, ok=None):
    """q (b, q, d_q), k (b, k, d_k) → context, weights, the appendix's alignment model."""
    wq, wk, v = (p.detach().numpy() for p in (m.w_q.weight, m.w_k.weight, m.v))
    q, k = q.numpy(), k.numpy()
    e = np.zeros((q.shape[0], q.shape[1], k.shape[1]))
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            for j in range(k.shape[1]):
                e[b, i, j] = v @ np.tanh(wq @ q[b, i] + wk @ k[b, j])
    if ok is not None:
        e = np.where(ok, e, -np.inf)
    w = np.exp(e - e.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ vals.numpy(), w


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_defaults_parameters_and_initialisation():
    torch.manual_seed(0)
    m = AdditiveAttention(3, 5, 400)
    assert (m.query_dim, m.key_dim, m.attn_dim) == (3, 5, 400)
    assert m.impl == "chunked" and m.max_elems == DEFAULT_MAX_ELEMS
    assert m.w_q.weight.shape == (400, 3) and m.w_q.bias is None
    assert m.w_k.weight.shape == (400, 5) and m.w_k.bias is None
    bound = 400**-0.5  # v ~ U(−1/√d_a, 1/√d_a)
    assert m.v.shape == (400,) and m.v.abs().max() <= bound and m.v.abs().max() > 0.9 * bound
    assert m.v.min() < -0.5 * bound and m.v.max() > 0.5 * bound
    assert m.extra_repr() == "query_dim=3, key_dim=5, attn_dim=400, impl='chunked'"
    assert AdditiveAttention(1, 1, 1, impl="reference").extra_repr() == "query_dim=1, key_dim=1, attn_dim=1, impl='reference'"


@pytest.mark.parametrize("args,name,bad", [
    ((0, 5, 4), "query_dim", "0"), ((3, 0, 4), "key_dim", "0"), ((3, 5, 0), "attn_dim", "0"),
    ((3.0, 5, 4), "query_dim", "3.0"), ((3, "5", 4), "key_dim", "'5'"), ((3, 5, None), "attn_dim", "None"),
])
def test_argument_messages(args, name, bad):
    assert message(lambda: AdditiveAttention(*args)) == f"{name} must be a positive int; got {bad}"


def test_impl_message():
    assert message(lambda: AdditiveAttention(3, 5, 4, impl="fast")) == (
        "impl must be one of ('chunked', 'reference'); got 'fast'")


@pytest.mark.parametrize("impl", ["chunked", "reference"])
@pytest.mark.parametrize("traced", [False, True])
def test_every_path_gives_the_papers_numbers(impl, traced):
    torch.manual_seed(1)
    m = AdditiveAttention(3, 4, 5, impl=impl, max_elems=6).double()
    q, k, v = t(2, 3, 3, seed=1), t(2, 4, 4, seed=2), t(2, 4, 2, seed=3)
    ok = torch.tensor([[True, False, True, True], [True, True, True, False]])
    ref_c, ref_w = np_reference(m, q, k, v, ok.numpy()[:, None, :])
    with attnlab.trace() if traced else contextlib.nullcontext() as tr:
        c, w = m(q, k, v, mask=ok, need_weights=True)
        c_pk, w_pk = m(q, k, v, mask=ok, projected_keys=m.precompute(k, ok), need_weights=True)
    if traced:
        assert "tanh" in tr and "scores" in tr
    for cc, ww in ((c, w), (c_pk, w_pk)):
        np.testing.assert_allclose(ww.detach().numpy(), ref_w, atol=1e-12)
        np.testing.assert_allclose(cc.detach().numpy(), ref_c, atol=1e-12)


def test_precompute_is_w_k_of_the_masked_keys():
    torch.manual_seed(2)
    m = AdditiveAttention(3, 4, 5).double()
    k = t(2, 3, 4, seed=4)
    k[1, 0] = float("inf")
    ok = torch.tensor([[True, True, True], [False, True, True]])
    kz = np.where(ok.numpy()[..., None], np.nan_to_num(k.numpy(), posinf=0.0), 0.0)
    np.testing.assert_allclose(m.precompute(k, ok).detach().numpy(), kz @ m.w_k.weight.detach().numpy().T, atol=1e-13)
    np.testing.assert_allclose(m.precompute(k[:1]).detach().numpy(), k[:1].numpy() @ m.w_k.weight.detach().numpy().T,
                               atol=1e-13)


def test_projected_keys_are_used_as_given_by_the_chunked_path_only():
    torch.manual_seed(3)
    q, k = t(2, 3, 3, seed=5), t(2, 4, 4, seed=6)
    zeros = torch.zeros(2, 4, 5, dtype=torch.float64)
    chunked = AdditiveAttention(3, 4, 5).double()
    _, w = chunked(q, k, projected_keys=zeros, need_weights=True)  # every key scores vᵀ tanh(W_q s): uniform
    torch.testing.assert_close(w, torch.full((2, 3, 4), 0.25, dtype=torch.float64))
    reference = AdditiveAttention(3, 4, 5, impl="reference").double()
    reference.load_state_dict(chunked.state_dict())
    _, w_ref = reference(q, k, projected_keys=zeros, need_weights=True)  # the readable path reads the raw keys
    np.testing.assert_allclose(w_ref.detach().numpy(), np_reference(chunked, q, k, k)[1], atol=1e-12)
    assert message(lambda: chunked(q, k, projected_keys=zeros[..., :4])) == (
        "projected_keys must be (b, k, d) = (2, 4, 5) (precompute(keys) of these keys); got (2, 4, 4)")


@pytest.mark.parametrize("impl,projected", [("chunked", False), ("chunked", True), ("reference", False)])
def test_kv_finite_reaches_the_core(impl, projected):
    """``kv_finite=True`` is the caller's word that masked keys/values are finite; the core skips its
    pass, so a NaN planted in a masked value shows (0 · NaN); without the flag it does not."""
    torch.manual_seed(4)
    m = AdditiveAttention(3, 3, 4, impl=impl).double()
    q, k, v = t(2, 3, seed=7), t(2, 3, 3, seed=8), t(2, 3, 2, seed=9)
    v[:, 1] = float("nan")
    ok = torch.tensor([[True, False, True]] * 2)
    kw = {"projected_keys": m.precompute(k, ok)} if projected else {}
    assert torch.isfinite(m(q, k, v, mask=ok, **kw)[0]).all()
    assert torch.isnan(m(q, k, v, mask=ok, kv_finite=True, **kw)[0]).all()


@pytest.mark.parametrize("impl", ["chunked", "reference"])
def test_need_weights_false_and_single_step(impl):
    torch.manual_seed(5)
    m = AdditiveAttention(2, 3, 4, impl=impl).double()
    q, k = t(3, 2, seed=10), t(3, 5, 3, seed=11)
    ref_c, ref_w = np_reference(m, q[:, None], k, k)
    for kw in ({}, {"projected_keys": m.precompute(k)}):
        c, w = m(q, k, **kw, need_weights=True)
        np.testing.assert_allclose(c.detach().numpy(), ref_c[:, 0], atol=1e-12)
        np.testing.assert_allclose(w.detach().numpy(), ref_w[:, 0], atol=1e-12)
        c2, w2 = m(q, k, need_weights=False, **kw)
        assert w2 is None
        torch.testing.assert_close(c2, c)


def test_gradients_of_the_chunked_path_equal_the_reference_path():
    torch.manual_seed(6)
    m = AdditiveAttention(3, 4, 5, max_elems=4).double()
    r = AdditiveAttention(3, 4, 5, impl="reference").double()
    r.load_state_dict(m.state_dict())
    q, k = t(2, 3, 3, seed=12).requires_grad_(), t(2, 4, 4, seed=13).requires_grad_()
    g = torch.autograd.grad(m(q, k)[0].square().sum(), (q, k, *m.parameters()))
    g_ref = torch.autograd.grad(r(q, k)[0].square().sum(), (q, k, *r.parameters()))
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("projected", [False, True])
def test_the_memory_budget_reaches_the_kernel(projected):
    """``max_elems`` bounds the chunked kernel's blocks; the module passes its own, so a budget of 0 is refused
    (the reference path has no blocks and ignores it)."""
    m = AdditiveAttention(3, 3, 4).double()
    m.max_elems = 0  # past the constructor's own check: the forward hands the module's budget to the kernel
    q, k = t(2, 3, seed=14), t(2, 4, 3, seed=15)
    kw = {"projected_keys": m.precompute(k)} if projected else {}
    assert message(lambda: m(q, k, **kw)) == "max_elems must be >= 1; got 0"
    reference = AdditiveAttention(3, 3, 4, impl="reference").double()
    reference.max_elems = 0
    assert reference(q, k)[0].shape == (2, 3)
