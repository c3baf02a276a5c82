"""The contract in the kernels, against a float64 dense reference written here from the equations:

    o_i = Σ_j softmax_j(q_i·k_j / √d + mask_ij) v_j,   mask = pattern.materialize(n) & padding,
    a row with no allowed key → 0, ℓ_i = log Σ_j exp(s_ij) (−∞ on such rows).

Also the device dispatch, flex attention (eager, forward, on CPU), the (out, lse) entry point and
the merge of partial results, and the empty / degenerate inputs."""

import gc
import math
import weakref

import pytest
import torch

from attnlab import kernels as K
from attnlab import patterns as P
from attnlab.kernels import devices, tiles


def reference(q, k, v, allow):
    """float64 dense attention written from the equations: allow (b or 1, 1, n, n) bool."""
    q, k, v = q.double(), k.double(), v.double()
    bad = ~allow
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(bad, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    w = torch.where(z > 0, e / torch.where(z > 0, z, 1.0), 0.0)
    lse = torch.where(z[..., 0] > 0, torch.log(torch.where(z > 0, z, 1.0))[..., 0] + m[..., 0], float("-inf"))
    return w @ v, lse


def qkv(b, h, n, d, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64).requires_grad_(grad) for _ in range(3)]


PATTERNS = {
    "window": P.sliding_window(3, 2),
    "longformer": P.sliding_window(3, 2) | P.global_tokens([4, 17]),
    "bigbird": P.sliding_window(3, 2) | P.global_tokens([4]) | P.random_blocks(1, 8, seed=1),
    "strided": P.strided(5),
    "generic": P.causal() & P.dilated_window(2, 3),
}


def _pad(b, n):
    real = torch.ones(b, n, dtype=torch.bool)
    real[0, n - 7 :] = False  # a shorter first sequence
    real[1, 5:9] = False  # holes in the middle of the second
    return real


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_padded_non_finite_keys_and_values_influence_nothing(name, bad):
    pattern, n = PATTERNS[name], 29
    q, k, v = qkv(2, 2, n, 4)
    real = _pad(2, n)
    allow = pattern.materialize(n) & real[:, None, None, :]
    ref, _ = reference(q, k, v, allow)
    g = torch.randn_like(ref)
    want = torch.autograd.grad(ref, (q, k, v), g)
    k2, v2 = k.detach().clone(), v.detach().clone()
    hole = ~real[:, None, :].expand(2, 2, n)
    k2[hole], v2[hole] = bad, bad
    k2.requires_grad_(), v2.requires_grad_()
    out, _ = K.block_sparse_attention(q, k2, v2, pattern, block=8, mask=real)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    got = torch.autograd.grad(out, (q, k2, v2), g)
    for a, w in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, w, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", ["window", "longformer", "generic"])
def test_fully_masked_rows_zero_output_and_finite_zero_gradients(name):
    pattern, n = PATTERNS[name], 21
    q, k, v = qkv(2, 2, n, 4)
    real = torch.ones(2, n, dtype=torch.bool)
    real[1] = False  # nothing to attend in the second sequence
    out, _ = K.block_sparse_attention(q, k, v, pattern, block=8, mask=real)
    assert (out[1] == 0).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all() and (t.grad[1] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_a_non_finite_query_or_future_key_reaches_no_other_row_nor_gradient(name, causal):
    """NaN in q, k and v of token j (as a projection of a NaN token gives): the rows that may not
    attend j keep the clean reference's outputs and gradients, although they share tiles with j."""
    pattern, n, j = PATTERNS[name], 29, 12
    pattern = pattern & P.causal() if causal else pattern
    allow = pattern.materialize(n)[None, None]  # (1, 1, n, n)
    q, k, v = qkv(2, 2, n, 4)
    ref, _ = reference(q, k, v, allow)
    keep = ~allow[0, 0, :, j]  # (n,) rows that may not attend j
    keep[j] = False
    g = torch.randn_like(ref) * keep[:, None]  # no gradient into the rows that attend j
    want = torch.autograd.grad(ref, (q, k, v), g)
    q2, k2, v2 = (t.detach().clone() for t in (q, k, v))
    for t in (q2, k2, v2):
        t[:, :, j] = float("nan")
        t.requires_grad_()
    out, _ = K.block_sparse_attention(q2, k2, v2, pattern, block=8)
    torch.testing.assert_close(out[:, :, keep], ref[:, :, keep], atol=1e-10, rtol=0)
    assert torch.isnan(out[:, :, ~keep]).all(-1).all()  # the rows that may attend j (and j itself): NaN
    for a, w in zip(torch.autograd.grad(out, (q2, k2, v2), g), want):
        torch.testing.assert_close(a, w, atol=1e-10, rtol=0)  # finite, and zero at j


@pytest.mark.parametrize("name", ["window", "bigbird", "generic"])
def test_the_kernel_is_a_custom_op_that_opcheck_accepts(name):
    """Schema, fake (meta) implementation, autograd registration and AOT dispatch of the CPU op."""
    pattern, n = PATTERNS[name], 29
    q, k, v = qkv(2, 2, n, 4)
    keys = tiles._key_real(_pad(2, n), 2, n, 4, 8, q.device)  # (b, nb, B)
    held = K.plan(pattern, n, 8)
    for args in ((q, k, v, keys, held.id, 0.5, 0.0, True),
                 (q, k, v, None, held.id, 0.5, 0.0, False)):
        torch.library.opcheck(torch.ops.attnlab.block_sparse.default, args)


@pytest.mark.parametrize("shape", [(2, 3, 0, 4), (0, 3, 10, 4), (2, 0, 10, 4), (0, 0, 0, 4)])
@pytest.mark.parametrize("name", ["window", "longformer", "bigbird", "generic"])
def test_empty_input_gives_empty_output_of_the_right_shape(shape, name):
    q, k, v = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    real = torch.ones(shape[0], shape[2], dtype=torch.bool)
    out, w = K.block_sparse_attention(q, k, v, PATTERNS[name], block=8, mask=real, need_weights=True)
    assert out.shape == shape and w.values.shape[:2] == shape[:2]
    out.sum().backward()
    assert q.grad.shape == shape


@pytest.mark.parametrize("nq,nk", [(0, 0), (5, 0), (0, 5)])
def test_topk_with_no_queries_or_no_keys_gives_an_empty_or_zero_output(nq, nk):
    q = torch.randn(2, 3, nq, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, nk, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 3, nk, 6, dtype=torch.float64, requires_grad=True)
    out = K.topk_attention(q, k, v, 2)
    assert out.shape == (2, 3, nq, 6) and (out == 0).all()  # SDPA's shapes; no key: every row fully masked
    for t in torch.autograd.grad(out.sum(), (q, k, v)):
        assert (t == 0).all()


def test_zero_features_raise_value_error():
    q = torch.randn(1, 1, 5, 0)
    with pytest.raises(ValueError, match="d >= 1"):
        K.block_sparse_attention(q, q, q, P.sliding_window(2))


def test_a_patterns_plan_is_held_on_the_pattern_and_dropped_with_it():
    pattern = P.sliding_window(2) | P.strided(3)
    q, k, v = qkv(1, 1, 20, 4, grad=False)
    K.block_sparse_attention(q, k, v, pattern, block=4)
    (held,) = pattern.kernel_plans.values()
    assert list(held.forms) == [("tiles", "rest", 1)]  # the rest beside the window, for b·h = 1
    assert K.plan(pattern, 20, 4) is held
    gone = weakref.ref(held)
    del pattern, held
    gc.collect()
    assert gone() is None


# --- device dispatch -------------------------------------------------------------------------


def test_backend_is_chosen_by_the_device():
    assert devices.backend_for(torch.device("cpu")) == "cpu"
    assert devices.backend_for(torch.device("cuda", 0)) == "flex"
    assert devices.backend_for(torch.device("mps")) == "dense"
    assert devices.backend_for(torch.device("meta")) == "dense"


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile", "ignore:There is a performance drop")
@pytest.mark.parametrize("backend", ["dense", "flex"])
@pytest.mark.parametrize("name", ["window", "longformer", "bigbird", "strided"])
def test_each_backend_equals_the_reference_on_cpu(monkeypatch, backend, name):
    # route CPU tensors to the other backends (flex runs eagerly, forward only, on CPU)
    monkeypatch.setattr(devices, "backend_for", lambda device: backend)
    pattern, n = PATTERNS[name], 40
    q, k, v = qkv(2, 2, n, 8, grad=backend == "dense")
    real = _pad(2, n)
    out, w = K.block_sparse_attention(q, k, v, pattern, block=8, mask=real, need_weights=True)
    allow = pattern.materialize(n) & real[:, None, None, :]
    ref, _ = reference(q, k, v, allow)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    s = (q.detach() @ k.detach().transpose(-1, -2) / math.sqrt(8)).masked_fill(~allow, float("-inf"))
    want_w = torch.softmax(s, -1).nan_to_num(nan=0.0)  # rows with no key: zero weights
    torch.testing.assert_close(w.to_dense(), want_w, atol=1e-10, rtol=0)
    if backend == "dense":
        g = torch.randn_like(out)
        for a, w in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
            torch.testing.assert_close(a, w, atol=1e-10, rtol=0)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile", "ignore:There is a performance drop")
def test_flex_lse_and_fully_masked_rows_on_cpu():
    pattern, n = PATTERNS["longformer"], 33
    q, k, v = qkv(2, 2, n, 8, grad=False)
    real = torch.ones(2, n, dtype=torch.bool)
    real[1] = False
    out, lse = devices.flex_pattern_attention(q, k, v, pattern, real, 1 / math.sqrt(8), compiled=False, return_lse=True)
    ref, ref_lse = reference(q, k, v, pattern.materialize(n) & real[:, None, None, :])
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-10, rtol=0)
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile", "ignore:There is a performance drop")
def test_block_masks_are_built_once_per_pattern_length_and_device():
    pattern = P.sliding_window(4)
    a = K.plan(pattern, 64).block_mask(16)
    assert K.plan(pattern, 64).block_mask(16) is a
    assert K.plan(pattern, 80).block_mask(16) is not a


@pytest.mark.cuda
def test_cuda_patterns_through_flex_forward_and_backward():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the flex path on CUDA is not exercised here")
    for name in ("window", "longformer", "bigbird", "strided"):
        pattern, n = PATTERNS[name], 300
        q, k, v = (t.detach().float().cuda().requires_grad_() for t in qkv(2, 2, n, 64))
        real = _pad(2, n).cuda()
        out, _ = K.block_sparse_attention(q, k, v, pattern, mask=real)
        ref, _ = reference(q, k, v, pattern.materialize(n, device="cuda") & real[:, None, None, :])
        torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=0)
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), g)
        want = torch.autograd.grad(ref, (q, k, v), g.double())
        for a, w in zip(got, want):
            torch.testing.assert_close(a.double(), w, atol=5e-3, rtol=0)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # the hot path (block mask cached) reads nothing back
        try:
            out, _ = K.block_sparse_attention(q, k, v, pattern, mask=real)
            out.sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")


# --- (out, lse) and merge --------------------------------------------------------------------


def test_attention_lse_equals_the_reference_with_gradients():
    q, k, v = qkv(2, 2, 9, 4)
    allow = torch.rand(2, 1, 9, 9, generator=torch.Generator().manual_seed(1)) > 0.5
    allow[0, 0, 3] = False  # a row with no key
    out, lse = K.attention_lse(q, k, v, allow)
    ref, ref_lse = reference(q, k, v, allow)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=0)
    fin = torch.isfinite(ref_lse)
    g, gl = torch.randn_like(out), torch.randn_like(lse)
    got = torch.autograd.grad((out * g).sum() + (lse[fin] * gl[fin]).sum(), (q, k, v))
    want = torch.autograd.grad((ref * g).sum() + (ref_lse[fin] * gl[fin]).sum(), (q, k, v))
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, atol=1e-12, rtol=0)


@pytest.mark.parametrize("chunks", [2, 3, 4])
def test_merging_key_chunks_equals_full_attention(chunks):
    n = 23
    q, k, v = qkv(2, 3, n, 5, seed=chunks)
    allow = P.sliding_window(4, 2).materialize(n) & _pad(2, n)[:, None, None, :]  # (2, 1, n, n)
    allow[1, :, 10] = False  # a row with no key anywhere
    ref, ref_lse = reference(q, k, v, allow)
    cuts = torch.linspace(0, n, chunks + 1).round().long().tolist()
    parts = [K.attention_lse(q, k[:, :, s:e], v[:, :, s:e], allow[..., s:e]) for s, e in zip(cuts, cuts[1:])]
    out, lse = K.merge(parts)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=0)
    assert (out[1, :, 10] == 0).all()
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g)
    for a, w in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, w, atol=1e-12, rtol=0)


def test_attention_lse_ignores_non_finite_masked_keys():
    q, k, v = qkv(1, 1, 6, 3)
    allow = torch.ones(1, 1, 6, 6, dtype=torch.bool)
    allow[..., 4:] = False
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[..., 4:, :], v2[..., 4:, :] = float("nan"), float("inf")
    out, lse = K.attention_lse(q, k2, v2, allow)
    ref, ref_lse = reference(q, k, v, allow)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=1e-12, rtol=0)


def test_merge_rejects_mismatched_parts():
    with pytest.raises(ValueError, match="at least one"):
        K.merge([])


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_compiled_flex_on_cpu_inference_with_changing_padding():
    # torch.compile(flex_attention) runs on the CPU for inference (no lse, no backward): one block mask
    # per (pattern, n, device), the padding a score_mod, so a new padding must give new results
    n, scale = 256, 0.25
    for pattern in (PATTERNS["longformer"], P.sliding_window(8) | P.global_tokens([0, 5]) | P.random_blocks(1, 32)):
        q, k, v = (t.detach().float() for t in qkv(2, 2, n, 16, grad=False))
        for cut in (0.3, 0.6):
            real = torch.rand(2, n, generator=torch.Generator().manual_seed(int(cut * 10))) > cut
            out = devices.flex_pattern_attention(q, k, v, pattern, real, scale, compiled=True)
            ref, _ = reference(q, k, v, pattern.materialize(n) & real[:, None, None, :])
            torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=0)
