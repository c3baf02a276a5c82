"""The block-sparse kernel against dense masked attention (attnlab.attention with the materialised mask)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
from attnlab import kernels as K
from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention, topk_attention, weights_for_rows


def qkv(b, h, n, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=dtype).requires_grad_() for _ in range(3)]


def padding(b, n):
    pad = torch.ones(b, n, dtype=torch.bool)
    if b > 1:
        pad[1, n - n // 3 :] = False  # the second sequence is shorter
    return pad


def dense(q, k, v, pattern, pad=None):
    n = q.shape[-2]
    mask = pattern.materialize(n)
    if pad is not None:
        mask = mask & pad[:, None, None, :]
    out, w = attnlab.attention(q, k, v, mask=mask, need_weights=True)
    return out, w


def compare(pattern, n, block, dtype=torch.float64, tol=1e-10, b=2, h=3, d=8, use_pad=True):
    q, k, v = qkv(b, h, n, d, dtype)
    pad = padding(b, n) if use_pad else None
    out, _ = block_sparse_attention(q, k, v, pattern, block=block, key_padding_mask=pad)
    ref, _ = dense(q, k, v, pattern, pad)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g)
    torch.testing.assert_close(out, ref, atol=tol, rtol=0)
    for a, w in zip(got, want):
        torch.testing.assert_close(a, w, atol=tol, rtol=0)


PATTERNS = [
    P.full(),
    P.causal(),
    P.sliding_window(5, 2),
    P.sliding_window(6, 0),
    P.dilated_window(2, 4),
    P.strided(5),
    P.fixed(6, 2),
    P.global_tokens([0, 17]),
    P.random_blocks(2, 8, seed=1),
    P.sliding_window(3) | P.global_tokens([5]) | P.random_blocks(1, 8, seed=2),
    P.strided(4) & P.causal(),
    P.sliding_window(4, 1) | P.global_tokens([2, 9, 30]),  # Longformer: window + dense global parts
    P.global_tokens(range(40)) | P.sliding_window(1),  # every position global: no rows part
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=repr)
@pytest.mark.parametrize("n", [16, 37])
def test_float64_equals_dense_masked(pattern, n):
    compare(pattern, n, block=8)


@pytest.mark.parametrize("pattern", PATTERNS[:4] + PATTERNS[-4:], ids=repr)
def test_float32_equals_dense_masked(pattern):
    compare(pattern, 45, block=16, dtype=torch.float32, tol=1e-5)


@settings(max_examples=25, deadline=None)
@given(
    block=st.sampled_from([2, 3, 4, 8]),
    nb=st.integers(1, 6),
    cut=st.integers(0, 1),
    bits=st.lists(st.booleans(), min_size=36, max_size=36),
    padded=st.booleans(),
)
def test_random_layouts_equal_dense(block, nb, cut, bits, padded):
    layout = torch.tensor(bits[: nb * nb], dtype=torch.bool).reshape(nb, nb)
    n = max(1, nb * block - cut * (block - 1))
    compare(P.block_sparse(layout, block), n, block, b=2, h=2, d=3, use_pad=padded)


@pytest.mark.parametrize("before, after", [(70, 30), (0, 64), (100, 0), (16, 16)])
@pytest.mark.parametrize("use_pad", [False, True])
def test_window_band_path_interior_and_boundary_tiles(before, after, use_pad):
    # the banded path tiles queries by `block` without autograd and by 256 with it: n spans many tiles
    pat = P.sliding_window(before, after)
    q, k, v = qkv(2, 2, 1100, 4)
    pad = padding(2, 1100) if use_pad else None
    ref, _ = dense(q, k, v, pat, pad)
    with torch.no_grad():
        fast, _ = block_sparse_attention(q, k, v, pat, block=16, key_padding_mask=pad)
    torch.testing.assert_close(fast, ref, atol=1e-10, rtol=0)
    out, _ = block_sparse_attention(q, k, v, pat, block=16, key_padding_mask=pad)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    g = torch.randn_like(out)
    for a, w in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, w, atol=1e-10, rtol=0)


DIRTY = [P.sliding_window(3, 2), P.sliding_window(3, 2) | P.global_tokens([4]), P.random_blocks(1, 8, seed=3), P.causal()]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("pattern", DIRTY, ids=repr)
def test_masked_keys_and_values_never_influence_the_output(bad, pattern):
    n = 29
    q, k, v = qkv(2, 2, n, 4)
    pad = padding(2, n)  # the second sequence's last n // 3 keys are padding
    clean, cw = block_sparse_attention(q, k, v, pattern, block=8, key_padding_mask=pad, need_weights=True)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[1, :, n - n // 3 :] = bad
    v2[1, :, n - n // 3 :] = bad
    k2.requires_grad_(), v2.requires_grad_()
    dirty, dw = block_sparse_attention(q, k2, v2, pattern, block=8, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(dirty, clean, atol=1e-12, rtol=0)
    torch.testing.assert_close(dw.values, cw.values, atol=1e-12, rtol=0)
    g = torch.randn_like(dirty)
    got = torch.autograd.grad(dirty, (q, k2, v2), g)
    want = torch.autograd.grad(clean, (q, k, v), g)
    for a, w in zip(got, want):  # finite, and equal: padded keys get zero gradients either way
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, w, atol=1e-12, rtol=0)
    # the same non-finite inputs through dense masked attention (attnlab.attention, the contract's source)
    ref, _ = dense(q, k2, v2, pattern, pad)
    torch.testing.assert_close(dirty, ref, atol=1e-10, rtol=0)


@pytest.mark.parametrize("what", ["key", "value"])
def test_a_non_finite_key_or_value_reaches_exactly_the_queries_that_may_attend_it(what):
    # window (2, 1): the key at 20 is seen by queries 19..22 only; both the banded and the tile path
    n, at = 40, 20
    for pattern in (P.sliding_window(2, 1), P.sliding_window(2, 1) | P.global_tokens([0])):
        q, k, v = qkv(1, 2, n, 3)
        (k if what == "key" else v).data[:, :, at, 0] = float("nan")
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                out, _ = block_sparse_attention(q, k, v, pattern, block=8)
            ref, _ = dense(q, k, v, pattern)
            ok = torch.isfinite(ref).all(-1, keepdim=True)  # the core makes a whole row NaN; compare the others
            torch.testing.assert_close(out.masked_fill(~ok, 0.0), ref.masked_fill(~ok, 0.0), atol=1e-10, rtol=0)
            hit = ~torch.isfinite(out).all(-1)[0, 0]  # (n,) queries whose output has a NaN
            seen = pattern.materialize(n)[:, at]
            assert torch.equal(hit, seen), (pattern, hit.nonzero().flatten().tolist())


def test_gradcheck():
    q, k, v = qkv(1, 2, 11, 3)
    pad = torch.tensor([[True] * 9 + [False] * 2])
    pat = P.sliding_window(2, 3) | P.global_tokens([4])
    f = lambda q, k, v: block_sparse_attention(q, k, v, pat, block=4, key_padding_mask=pad)[0]  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_gradcheck_with_dropout():
    q, k, v = qkv(1, 1, 9, 2)

    def f(q, k, v):
        torch.manual_seed(3)  # the same dropout mask on every call
        return block_sparse_attention(q, k, v, P.sliding_window(2), block=4, dropout_p=0.3)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))
    with torch.no_grad():
        assert not torch.allclose(f(q, k, v), block_sparse_attention(q, k, v, P.sliding_window(2), block=4)[0])


def test_fully_masked_rows_are_zero_with_finite_grads():
    # block row 1 has no key block at all, and batch 1 pads every key out
    layout = torch.tensor([[1, 0], [0, 0]], dtype=torch.bool)
    q, k, v = qkv(2, 2, 7, 3)
    pad = torch.tensor([[True] * 7, [False] * 7])
    out, _ = block_sparse_attention(q, k, v, P.block_sparse(layout, 4), block=4, key_padding_mask=pad)
    assert (out[0, :, 4:] == 0).all() and (out[1] == 0).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[0, :, 4:] == 0).all() and (q.grad[1] == 0).all() and (k.grad[1] == 0).all()


@pytest.mark.parametrize("pattern", [P.sliding_window(2), P.sliding_window(2) | P.global_tokens([1])], ids=repr)
def test_fully_masked_rows_window_and_merged_parts(pattern):
    # batch 1 pads every key out (dead in every part); in batch 0 the last queries' windows are padded
    # but global token 1 is not (dead in the window part, alive overall)
    q, k, v = qkv(2, 2, 40, 4)
    pad = torch.ones(2, 40, dtype=torch.bool)
    pad[0, 30:] = False
    pad[1] = False
    out, _ = block_sparse_attention(q, k, v, pattern, block=8, key_padding_mask=pad)
    ref, _ = dense(q, k, v, pattern, pad)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    assert (out[1] == 0).all()
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g)
    for a, w in zip(got, want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, w, atol=1e-10, rtol=0)


def test_bfloat16_close_to_float32():
    q, k, v = qkv(1, 2, 40, 16, torch.float32)
    pat = P.sliding_window(7)
    ref, _ = block_sparse_attention(q, k, v, pat, block=16)
    low = [t.detach().bfloat16().requires_grad_() for t in (q, k, v)]
    out, _ = block_sparse_attention(*low, pat, block=16)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=3e-2, rtol=3e-2)
    out.float().sum().backward()
    assert low[0].grad.dtype == torch.bfloat16 and torch.isfinite(low[0].grad.float()).all()


def test_weights_of_blocks_and_rows_equal_dense():
    q, k, v = qkv(2, 2, 21, 4)
    pat = P.sliding_window(3, 1) | P.global_tokens([10])
    pad = padding(2, 21)
    out, bw = block_sparse_attention(q, k, v, pat, block=8, key_padding_mask=pad, need_weights=True)
    ref, w = dense(q, k, v, pat, pad)
    torch.testing.assert_close(bw.to_dense(), w.detach(), atol=1e-12, rtol=0)
    assert {tuple(t) for t in bw.index.tolist()} == {tuple(t) for t in pat.blocks(21, 8).tolist()}
    rows = weights_for_rows(q, k, pat, [0, 10, 20], key_padding_mask=pad)
    torch.testing.assert_close(rows, w[:, :, [0, 10, 20]], atol=1e-12, rtol=0)
    # the fast path (no weights) gives the same output
    fast, none = block_sparse_attention(q, k, v, pat, block=8, key_padding_mask=pad)
    assert none is None
    torch.testing.assert_close(fast, out, atol=0, rtol=0)


def test_topk_attention_equals_dense_with_the_topk_mask():
    q, k, v = qkv(2, 2, 19, 4)
    pad = padding(2, 19)
    tk = K.top_k(5, within=P.causal())
    out = topk_attention(q, k, v, tk, key_padding_mask=pad[:, None])
    mask = tk.mask(q.detach(), k.detach(), key_padding_mask=pad[:, None])
    ref, _ = attnlab.attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block": 0}, "block must be a positive integer"),
        ({"key_padding_mask": torch.ones(2, 5, dtype=torch.bool)}, "key_padding_mask must be bool"),
        ({"dropout_p": 1.0}, "dropout_p"),
    ],
)
def test_bad_input_raises(kwargs, match):
    q, k, v = qkv(2, 1, 6, 2)
    with pytest.raises(ValueError, match=match):
        block_sparse_attention(q, k, v, P.causal(), **kwargs)
    with pytest.raises(ValueError, match="same b, h, n and d"):
        block_sparse_attention(q, k[:, :, :5], v, P.causal())
    with pytest.raises(ValueError, match="Pattern"):
        block_sparse_attention(q, k, v, torch.ones(6, 6, dtype=torch.bool))


PEAK = textwrap.dedent(
    """
    import sys, torch
    from attnlab import patterns as P
    from attnlab.kernels import block_sparse_attention
    torch.set_num_threads(2)
    n, w, h, d = (int(a) for a in sys.argv[1:5])
    q, k, v = (torch.randn(1, h, n, d, requires_grad=True) for _ in range(3))
    out, _ = block_sparse_attention(q, k, v, P.sliding_window(w), block=64)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
    print(int(hwm.split()[1]) * 1024)
    """
)


def peak_bytes(n, w, h, d):
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    res = subprocess.run([sys.executable, "-c", PEAK, str(n), str(w), str(h), str(d)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.split()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc/self/status (Linux) for VmHWM")
def test_memory_has_no_n_by_n_tensor():
    # n = 32768: one fp32 n×n score matrix would be 4 GiB; the window kernel stays far below
    peak = peak_bytes(32768, 32, 1, 16)
    assert peak < 1.0 * 2**30, f"peak RSS {peak / 2**30:.2f} GiB"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc/self/status (Linux) for VmHWM")
def test_memory_65536_window_256_fits_4_gib():
    peak = peak_bytes(65536, 256, 8, 64)
    assert peak < 4 * 2**30, f"peak RSS {peak / 2**30:.2f} GiB"


@pytest.mark.parametrize("pattern", [P.sliding_window(3, 1), P.strided(4)], ids=repr)
def test_value_width_different_from_key_width(pattern):
    q, k, _ = qkv(2, 2, 21, 3)
    v = torch.randn(2, 2, 21, 5, dtype=torch.float64, requires_grad=True)
    pad = padding(2, 21)
    out, _ = block_sparse_attention(q, k, v, pattern, block=8, key_padding_mask=pad)
    ref, _ = dense(q, k, v, pattern, pad)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    g = torch.randn_like(out)
    for a, w in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, w, atol=1e-10, rtol=0)


def test_explicit_path_when_the_private_fused_op_is_missing(monkeypatch):
    """Where a torch build lacks the private flash op, the kernel takes its explicit path."""
    import attnlab.kernels.block_sparse as bs

    torch.manual_seed(0)
    pattern = P.sliding_window(3) | P.global_tokens([0])
    q, k, v = (torch.randn(1, 2, 40, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    fused_out, _ = bs.block_sparse_attention(q, k, v, pattern, block=8)
    (g_fused,) = torch.autograd.grad(fused_out.sum(), q)
    monkeypatch.setattr(bs, "HAS_FUSED", False)
    out, _ = bs.block_sparse_attention(q, k, v, pattern, block=8)
    (g,) = torch.autograd.grad(out.sum(), q)
    ref, _ = attnlab.attention(q, k, v, mask=pattern.materialize(40))
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(out, fused_out, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(g, g_fused, atol=1e-10, rtol=1e-10)
