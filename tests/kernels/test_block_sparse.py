"""The block-sparse kernel against dense masked attention (attnlab.attention with the materialised mask)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
from attnlab import kernels as K
from attnlab import patterns as P
from attnlab.kernels import band, block_sparse_attention, topk_attention, weights_for_rows
from attnlab.kernels import block_sparse as bs
from attnlab.kernels.block_sparse import _forward, _layout
from attnlab.kernels.plans import Plan

import np_reference as ref


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
    out, _ = block_sparse_attention(q, k, v, pattern, block=block, mask=pad)
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
        fast, _ = block_sparse_attention(q, k, v, pat, block=16, mask=pad)
    torch.testing.assert_close(fast, ref, atol=1e-10, rtol=0)
    out, _ = block_sparse_attention(q, k, v, pat, block=16, mask=pad)
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
    clean, cw = block_sparse_attention(q, k, v, pattern, block=8, mask=pad, need_weights=True)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[1, :, n - n // 3 :] = bad
    v2[1, :, n - n // 3 :] = bad
    k2.requires_grad_(), v2.requires_grad_()
    dirty, dw = block_sparse_attention(q, k2, v2, pattern, block=8, mask=pad, need_weights=True)
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
    f = lambda q, k, v: block_sparse_attention(q, k, v, pat, block=4, mask=pad)[0]  # noqa: E731
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
    out, _ = block_sparse_attention(q, k, v, P.block_sparse(layout, 4), block=4, mask=pad)
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
    out, _ = block_sparse_attention(q, k, v, pattern, block=8, mask=pad)
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
    out, bw = block_sparse_attention(q, k, v, pat, block=8, mask=pad, need_weights=True)
    ref, w = dense(q, k, v, pat, pad)
    torch.testing.assert_close(bw.to_dense(), w.detach(), atol=1e-12, rtol=0)
    assert {tuple(t) for t in bw.index.tolist()} == {tuple(t) for t in pat.blocks(21, 8).tolist()}
    rows = weights_for_rows(q, k, pat, [0, 10, 20], mask=pad)
    torch.testing.assert_close(rows, w[:, :, [0, 10, 20]], atol=1e-12, rtol=0)
    # the fast path (no weights) gives the same output
    fast, none = block_sparse_attention(q, k, v, pat, block=8, mask=pad)
    assert none is None
    torch.testing.assert_close(fast, out, atol=0, rtol=0)


def test_topk_attention_equals_dense_with_the_topk_mask():
    q, k, v = qkv(2, 2, 19, 4)
    pad = padding(2, 19)
    tk = K.top_k(5, within=P.causal())
    out = topk_attention(q, k, v, tk, mask=pad[:, None])
    mask = tk.mask(q.detach(), k.detach(), mask=pad[:, None])
    ref, _ = attnlab.attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"block": 0}, "block must be a positive integer"),
        ({"mask": torch.ones(2, 5, dtype=torch.bool)}, "mask must be bool"),
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
    out, _ = block_sparse_attention(q, k, v, pattern, block=8, mask=pad)
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


# Block-sparse layout and forward: the parts the fused path builds and the lse of the tiled path.
#
# What is pinned: which parts the fused path builds (`_layout`: window, query tile, global rows, plan),
# that the plan is the one cached for the caller's b·h, the dropout seed's contract (0 without dropout,
# an int32-positive draw with it), the lse placeholder of the tiled path, and the all-empty layout's zero
# output. References: the masks written by hand; float64 NumPy softmax attention and its log-sum-exp.
def test_layout_of_a_window_alone_has_no_plan_and_the_grad_query_tile():
    win, T, g, pl = _layout(Plan(P.sliding_window(1), 4, block=2), 6, True)
    assert (win.before, win.after, g, pl) == (1, 1, None, None)
    assert T == 256  # with autograd the query tile is at least 256
    assert _layout(Plan(P.sliding_window(1), 4, block=2), 6, False)[1] == 2


def test_layout_of_global_tokens_alone_has_no_plan():
    win, _, g, pl = _layout(Plan(P.global_tokens([1]), 4, block=2), 6, False)
    assert win is None and pl is None and g.tolist() == [1]


def test_layout_drops_a_rest_inside_the_window():
    # window(1) adds no key beyond window(2): no plan part
    win, _, g, pl = _layout(Plan(P.sliding_window(2) | P.sliding_window(1), 4, block=2), 6, False)
    assert (win.before, g, pl) == (2, None, None)


def test_layout_drops_a_rest_inside_the_global_tokens():
    # every token is global: causal adds no key
    win, _, g, pl = _layout(Plan(P.global_tokens([0, 1, 2, 3]) | P.causal(), 4, block=2), 6, False)
    assert win is None and pl is None and g.tolist() == [0, 1, 2, 3]


def test_layout_plans_the_rest_for_the_callers_bh():
    pattern = P.global_tokens([1]) | P.causal()
    held = Plan(pattern, 4, block=2)
    _, _, g, pl = _layout(held, 6, False)
    assert g.tolist() == [1]
    assert pl is held.forms[("tiles", "rest", 6)]  # the rest's tiles for b·h = 6, held by the plan
    assert list(held.forms) == [("tiles", "rest", 6)]


def test_layout_with_nothing_left_plans_the_whole_pattern():
    pattern = P.global_tokens([9])  # no global token below n = 4, no window, no rest
    held = Plan(pattern, 4, block=2)
    win, _, g, pl = _layout(held, 6, False)
    assert win is None and g is None
    assert pl is held.forms[("tiles", "whole", 6)] and not pl.groups


def _qkv(b, h, n, d, dv=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=gen), torch.randn(b, h, n, d, generator=gen),
            torch.randn(b, h, n, d if dv is None else dv, generator=gen))


def test_forward_with_no_key_anywhere_is_zero_with_lse_minus_inf():
    q, k, v = _qkv(1, 1, 4, 3)
    out, lse, seed = _forward(q, k, v, None, Plan(P.global_tokens([9]), q.shape[2], block=2), 0.5, 0.0, False)
    assert torch.equal(out, torch.zeros(1, 1, 4, 3))
    if bs._fused(3, 3, 0.0):
        assert torch.equal(lse, torch.full((1, 1, 4), -np.inf))
    assert seed == 0


@pytest.mark.parametrize("pattern", [P.sliding_window(1), P.global_tokens([1]), P.global_tokens([1]) | P.causal(),
                                     P.sliding_window(1) | P.global_tokens([0]) | P.causal()])
def test_forward_out_and_lse_against_numpy(pattern):
    if not bs._fused(3, 3, 0.0):
        pytest.skip("no fused CPU kernel in this torch build")
    n = 6
    q, k, v = _qkv(1, 2, n, 3, seed=1)
    out, lse, seed = _forward(q, k, v, None, Plan(pattern, q.shape[2], block=2), 0.5, 0.0, False)
    allow = pattern.materialize(n).numpy()
    for hh in range(2):
        want, want_lse = ref.attention_lse(*(t[0, hh].double().numpy() for t in (q, k, v)), allow, 0.5)
        np.testing.assert_allclose(out[0, hh].numpy(), want, atol=1e-5)
        np.testing.assert_allclose(lse[0, hh].numpy(), want_lse, atol=1e-5)
    assert seed == 0


def test_forward_fused_plans_the_rest_for_b_times_h():
    if not bs._fused(3, 3, 0.0):
        pytest.skip("no fused CPU kernel in this torch build")
    pattern = P.global_tokens([1]) | P.causal()
    q, k, v = _qkv(2, 3, 4, 3)
    held = Plan(pattern, q.shape[2], block=2)
    _forward(q, k, v, None, held, 0.5, 0.0, False)
    assert list(held.forms) == [("tiles", "rest", 6)]


def test_forward_tiled_without_dropout_has_seed_zero_an_empty_lse_and_plans_for_b_times_h():
    pattern = P.causal()
    q, k, v = _qkv(2, 3, 4, 3, dv=2)  # d_v != d: the tiled path
    state = torch.get_rng_state()
    held = Plan(pattern, q.shape[2], block=2)
    out, lse, seed = _forward(q, k, v, None, held, 0.5, 0.0, False)
    assert seed == 0 and lse.shape == (0,)
    assert torch.equal(torch.get_rng_state(), state)  # no draw without dropout
    assert list(held.forms) == [("tiles", "whole", 6)]
    allow = pattern.materialize(4).numpy()
    want, _ = ref.attention_lse(q[1, 2].double().numpy(), k[1, 2].double().numpy(), v[1, 2].double().numpy(),
                               allow, 0.5)
    np.testing.assert_allclose(out[1, 2].numpy(), want, atol=1e-5)


def test_forward_dropout_seeds_fit_a_positive_int32():
    q, k, v = _qkv(1, 1, 4, 2)
    seeds = [_forward(q, k, v, None, Plan(P.causal(), q.shape[2], block=2), 0.5, 0.5, False)[2] for _ in range(24)]
    assert all(0 <= s < 2**31 - 1 for s in seeds)
    assert len(set(seeds)) > 1


def test_need_weights_plans_for_b_times_h():
    pattern = P.sliding_window(1) | P.causal()  # the fused path plans only the rest; the weights the whole
    q, k, v = _qkv(2, 3, 4, 3)
    _, w = block_sparse_attention(q, k, v, pattern, block=2, need_weights=True)
    assert ("tiles", "whole", 6) in K.plan(pattern, 4, 2).forms
    dense = w.to_dense()
    allow = pattern.materialize(4).numpy()
    s = q[1, 2].double().numpy() @ k[1, 2].double().numpy().T / np.sqrt(3)
    s = np.where(allow, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(dense[1, 2].numpy(), e / e.sum(-1, keepdims=True), atol=1e-5)


def test_need_weights_on_a_non_cpu_backend_plans_for_b_times_h(monkeypatch):
    # the weights of a GPU/other-device call are computed on CPU copies; the dense backend stands in
    monkeypatch.setattr(bs.devices, "backend_for", lambda device: "dense")
    pattern = P.causal()
    q, k, v = _qkv(2, 3, 4, 3)
    out, w = block_sparse_attention(q, k, v, pattern, block=2, need_weights=True)
    assert ("tiles", "whole", 6) in K.plan(pattern, 4, 2).forms
    allow = pattern.materialize(4).numpy()
    want, _ = ref.attention_lse(q[1, 2].double().numpy(), k[1, 2].double().numpy(), v[1, 2].double().numpy(),
                               allow, 1 / np.sqrt(3))
    np.testing.assert_allclose(out[1, 2].numpy(), want, atol=1e-5)
    assert w.values.device == q.device


# ---- the window kernel (kernels/band.py) ----

def test_segments_lists_only_nonempty_tile_ranges():
    # n = 8, T = 2, no reach either side: all 4 tiles are interior, one shared (T, L) = (2, 2) mask
    segs = band._segments(8, 4, 2, 0, 0)
    assert [(s, e) for s, e, _ in segs] == [(0, 4)]
    assert segs[0][2].tolist() == [[True, False], [False, True]]
    # before = after = 1: tile 0 reaches key -1, tile 3 key 8; tiles 1-2 are interior
    assert [(s, e) for s, e, _ in band._segments(8, 4, 2, 1, 1)] == [(0, 1), (1, 3), (3, 4)]


def test_chunk_spans_gathers_boundary_spans_with_zeros_outside():
    x = torch.arange(1.0, 5.0).reshape(1, 1, 4, 1)  # keys 1, 2, 3, 4 at positions 0..3
    # tile 0 of T = 2 with before = 6: positions -6..1 → six zeros, then 1, 2
    got = band._chunk_spans(x, 0, 1, 2, 6, 0)
    assert got.flatten().tolist() == [0, 0, 0, 0, 0, 0, 1, 2]
    # tile 1 with after = 2: positions 2..5 → 3, 4, then zeros for 4 and 5 (past n)
    got = band._chunk_spans(x, 1, 2, 2, 0, 2)
    assert got.flatten().tolist() == [3, 4, 0, 0]


def _dense_reference_grads(q, k, v, dout, before, after, scale):
    n = q.shape[-2]
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    allow = (j - i >= -before) & (j - i <= after)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = (qd @ kd.transpose(-1, -2) * scale).masked_fill(~allow, float("-inf"))
    out = torch.softmax(s, -1) @ vd
    out.backward(dout.double())
    return qd.grad, kd.grad, vd.grad


def test_band_backward_respects_the_span_budget_per_call(monkeypatch):
    if not bs._fused(3, 3, 0.0):
        pytest.skip("no fused CPU kernel in this torch build")
    q, k, v = _qkv(1, 2, 8, 3, seed=4)
    dout = torch.randn(1, 2, 8, 3, generator=torch.Generator().manual_seed(5))
    out, lse = band.band_forward(q, k, v, 1, 1, None, 0.5, 2)
    sizes = []
    real_bwd = band.flash.FLASH_BWD

    def counting(dot, qt, *args, **kwargs):
        sizes.append(qt.shape[1])  # tiles in this call
        return real_bwd(dot, qt, *args, **kwargs)

    monkeypatch.setattr(band.flash, "FLASH_BWD", counting)
    monkeypatch.setattr(band, "SPAN_BUDGET", 2 * 4 * 3)  # h·L·d = one tile's spans per call
    dq, dk, dv = band.band_backward(dout, q, k, v, out, lse, 1, 1, None, 0.5, 2)
    assert sizes == [1, 1, 1, 1]
    want = _dense_reference_grads(q, k, v, dout, 1, 1, 0.5)
    for got, expected in zip((dq, dk, dv), want):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-5)
