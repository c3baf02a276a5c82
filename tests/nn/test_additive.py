"""AdditiveAttention (Bahdanau) and the chunked additive kernel against float64 NumPy references."""

import numpy as np
import pytest
import torch

import attnlab
from attnlab.kernels.chunked_additive import chunked_additive_scores
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
    """Seed 000's three-word example with its parameters loaded (true values; the text's 1.32 is wrong)."""
    m = AdditiveAttention(2, 2, 2)
    with torch.no_grad():
        m.w_q.weight.copy_(torch.tensor([[0.1, 0.2], [0.3, 0.4]]))
        m.w_k.weight.copy_(torch.tensor([[0.5, 0.6], [0.7, 0.8]]))
        m.v.copy_(torch.tensor([1.0, 2.0]))
    h = torch.tensor([[[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]]])
    s = torch.tensor([[0.6, -0.2]])
    ctx, w = m(s, h, need_weights=True)
    u1 = np.tanh(np.array([0.02, 0.10]) + np.array([0.40, 0.54]))  # the seed's step 1, by hand
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
