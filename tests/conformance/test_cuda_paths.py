"""The paths that only CUDA takes, each against the CPU or a float64 reference (marked ``cuda``;
skipped with a message here): the fused non-finite rule, causal chunks and decoding through
SDPA's own kernels, packed documents (varlen), top-k, patterns with narrow heads (flex pads
them), and a decoding loop with a ``LayerCache``.
"""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab import patterns
from attnlab.kernels import block_sparse_attention, topk_attention, varlen_attention

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA path tests skip")]


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _both(*tensors):
    return [t.clone() for t in tensors], [t.cuda() for t in tensors]


@pytest.mark.parametrize("q_len,k_len", [(64, 64), (16, 64), (1, 64)])
@pytest.mark.parametrize("grad", [False, True])
def test_causal_with_nan_in_future_keys_matches_the_cpu(q_len, k_len, grad):
    q, k, v = _randn(2, 3, q_len, 16, seed=1), _randn(2, 3, k_len, 16, seed=2), _randn(2, 3, k_len, 16, seed=3)
    k[:, :, -3, 1] = float("nan")
    v[:, :, -5, 0] = float("inf")
    results = []
    for dev in ("cpu", "cuda"):
        qq, kk, vv = (t.to(dev).requires_grad_(grad) for t in (q, k, v))
        out, _ = attnlab.attention(qq, kk, vv, causal=True)
        grads = []
        if grad:
            w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=dev).view(out.shape)
            keep = torch.isfinite(out)
            grads = torch.autograd.grad(torch.where(keep, out * w, 0.0).sum(), (qq, kk, vv))
        results.append([out.detach().cpu(), *(g.cpu() for g in grads)])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padding_with_nan_padding_and_a_fully_masked_row_matches_the_cpu(dtype):
    q, k, v = (_randn(3, 4, 40, 32, seed=s, dtype=dtype) for s in (4, 5, 6))
    real = torch.ones(3, 40, dtype=torch.bool)
    real[1, 30:] = False
    real[2] = False
    k[1, :, 35] = float("nan")
    v[1, :, 31] = float("-inf")
    cpu, cuda = _both(q, k, v)
    want, _ = attnlab.attention(*cpu, mask=real[:, None, None])
    got, _ = attnlab.attention(*cuda, mask=real[:, None, None].cuda())
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(got.cpu(), want, **tol)
    assert torch.equal(got[2], torch.zeros_like(got[2]))


def test_varlen_runs_on_cuda_with_list_and_tensor_boundaries():
    lengths = [5, 17, 130, 1]
    total = sum(lengths)
    q, k, v = (_randn(total, 2, 16, seed=s, dtype=torch.float32) for s in (7, 8, 9))
    cu = [0, 5, 22, 152, 153]
    want, _ = varlen_attention(q, k, v, cu, causal=True)
    for bounds in (cu, torch.tensor(cu, dtype=torch.int32, device="cuda")):
        got, _ = varlen_attention(q.cuda(), k.cuda(), v.cuda(), bounds, causal=True)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def test_topk_runs_on_cuda_and_matches_the_cpu():
    q, k, v = (_randn(2, 2, 50, 16, seed=s, dtype=torch.float32) for s in (10, 11, 12))
    want = topk_attention(q, k, v, 8)
    got = topk_attention(q.cuda(), k.cuda(), v.cuda(), 8)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("d", [4, 8, 64])
@pytest.mark.parametrize("name", ["window", "causal window | globals", "documents"])
def test_patterns_with_every_head_size_match_dense_attention(name, d):
    pattern = {"window": patterns.sliding_window(20), "documents": patterns.documents([100, 60, 140]),
               "causal window | globals": patterns.causal() & patterns.sliding_window(30) | patterns.global_tokens([0, 7])}[name]
    n = 300
    q, k, v = (_randn(2, 2, n, d, seed=s, dtype=torch.float32).requires_grad_() for s in (13, 14, 15))
    want, _ = attnlab.attention(q, k, v, mask=pattern.materialize(n))
    qc, kc, vc = (t.detach().cuda().requires_grad_() for t in (q, k, v))
    got, _ = block_sparse_attention(qc, kc, vc, pattern)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-4)
    g = torch.linspace(-1, 1, want.numel()).view(want.shape)
    want_grads = torch.autograd.grad((want * g).sum(), (q, k, v))
    got_grads = torch.autograd.grad((got * g.cuda()).sum(), (qc, kc, vc))
    for a, b in zip(want_grads, got_grads):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-3)


def test_decoding_with_a_layer_cache_matches_the_full_causal_pass():
    torch.manual_seed(0)
    mha = attnlab.nn.MultiHeadAttention(64, 4).cuda().eval()
    x = torch.randn(2, 12, 64, device="cuda")
    with torch.no_grad():
        full = mha(x, causal=True)[0]
        cache = attnlab.nn.LayerCache()
        steps = [mha(x[:, i : i + 1], causal=True, cache=cache)[0] for i in range(12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-4, atol=1e-4)
