"""Block-sparse attention: messages, values, weights, gradients and dropout against float64.

References, all written here: masked softmax attention in float64 (scores q·kᵀ·scale, −∞ outside
``pattern.materialize(n) & padding``, a row with no key gives zeros; gradients by autograd on that formula),
the dropped weights checked entry by entry against it, error messages written out word for word.
"""

import math
import re

import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import block_sparse as bs
from attnlab.kernels import block_sparse_attention, devices, weights_for_rows
from attnlab.kernels.block_sparse import BlockWeights
from attnlab.kernels.plans import Plan


def ref_weights(q, k, allow, scale):
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~allow, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return torch.where(z > 0, e / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(e))


def qkv(b, h, n, d, dv=None, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, x, generator=g, dtype=dtype).requires_grad_() for x in (d, d, dv or d)]


def check(q, k, v, out, allow, scale, tol=1e-10):
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want = ref_weights(q2, k2, allow, scale) @ v2
    torch.testing.assert_close(out, want, atol=tol, rtol=0)
    g = torch.randn(want.shape, dtype=want.dtype, generator=torch.Generator().manual_seed(7))
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(want, (q2, k2, v2), g)):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


# --- argument checks, word for word -----------------------------------------------------------------


def _raises(msg, *args, **kw):
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        block_sparse_attention(*args, **kw)


def test_block_sparse_names_each_bad_tensor_word_for_word():
    q = torch.randn(1, 2, 6, 4)
    pat = P.causal()
    for i, name in enumerate(("query", "key", "value")):
        three = [q, q, q]
        three[i] = torch.randn(2, 6, 4)
        _raises(f"{name} must have at least 4 dimensions; got shape (2, 6, 4)", *three, pat)
        three[i] = torch.randn(1, 1, 2, 6, 4)
        _raises(f"{name} must be (b, h, n, d); got shape (1, 1, 2, 6, 4)", *three, pat)
        three[i] = [1.0]
        _raises(f"{name} must be a torch.Tensor; got list", *three, pat)
    head = "block-sparse self-attention needs query, key (b, h, n, d) and value (b, h, n, d_v) with the same b, h, n and d; "
    _raises(head + "got query (1, 2, 6, 4), key (1, 2, 5, 4), value (1, 2, 6, 4)", q, q[:, :, :5], q, pat)
    _raises(head + "got query (1, 2, 6, 4), key (1, 2, 6, 4), value (1, 1, 6, 4)", q, q, q[:, :1], pat)
    _raises(head + "got query (1, 2, 6, 4), key (1, 2, 6, 3), value (1, 2, 6, 4)", q, q[..., :3], q, pat)
    _raises(head + "got query (1, 2, 6, 4), key (1, 2, 6, 4), value (2, 2, 6, 4)", q, q, q.expand(2, 2, 6, 4), pat)


def test_block_sparse_names_each_bad_option_word_for_word():
    q = torch.randn(1, 2, 6, 4)
    _raises("pattern must be an attnlab.patterns.Pattern or an attnlab.kernels.Plan; got str", q, q, q, "causal")
    for bad in (0, -3, True, 2.0):
        _raises(f"block must be a positive integer; got {bad!r}", q, q, q, P.causal(), block=bad)
    for bad in (-0.1, 1.0, 2.0):
        _raises(f"dropout_p must be in [0, 1); got {bad}", q, q, q, P.causal(), dropout_p=bad)
    z = torch.randn(1, 2, 6, 0)
    _raises("query and key need at least one feature (d >= 1); got query (1, 2, 6, 0)", z, z, q, P.causal())
    _raises(
        "mask must be bool (b, k) or (b, 1, 1, k) with b=1, k=6 (True = may attend); got (1, 5) torch.bool",
        q, q, q, P.causal(), mask=torch.ones(1, 5, dtype=torch.bool),
    )
    _raises(
        "mask must be bool (b, k) or (b, 1, 1, k) with b=1, k=6 (True = may attend); got (3, 6) torch.bool",
        q, q, q, P.causal(), mask=torch.ones(3, 6, dtype=torch.bool),
    )


def test_block_of_one_and_dropout_of_zero_are_accepted():
    q, k, v = qkv(1, 1, 5, 3)
    out, _ = block_sparse_attention(q, k, v, P.sliding_window(1), block=1, dropout_p=0.0)
    check(q, k, v, out, P.sliding_window(1).materialize(5), 1 / math.sqrt(3))


# --- values, gradients and weights over the paths ---------------------------------------------------

CASES = {
    # name: (pattern, n, block, d, d_v, scale, padded)
    "window_fused_padded": (P.sliding_window(2, 1), 11, 4, 4, 4, None, True),
    "global_fused": (P.global_tokens([0, 7]), 10, 4, 4, 4, 0.7, False),
    "window_and_global_fused": (P.sliding_window(1) | P.global_tokens([3]), 9, 4, 4, 4, None, True),
    "strided_tiles_fused": (P.strided(3), 10, 4, 4, 4, None, True),
    "explicit_wider_values": (P.sliding_window(2, 0) | P.global_tokens([1]), 10, 4, 4, 6, 0.4, True),
    "explicit_narrower_values": (P.causal(), 7, 3, 4, 2, None, False),
    "nothing_allowed": (P.strided(3) & P.global_tokens([100]), 6, 4, 4, 4, None, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_block_sparse_output_gradients_and_weights_against_float64(case):
    pattern, n, block, d, dv, scale, padded = CASES[case]
    b, h = 2, 2
    q, k, v = qkv(b, h, n, d, dv, seed=len(case))
    real = torch.ones(b, n, dtype=torch.bool)
    if padded:
        real[1, n - 3 :] = False
        real[0, 1] = False
    allow = pattern.materialize(n) & real[:, None, None, :]
    s = 1 / math.sqrt(d) if scale is None else scale
    out, w = block_sparse_attention(q, k, v, pattern, block=block, mask=real if padded else None,
                                    scale=scale, need_weights=True)
    assert out.shape == (b, h, n, dv)
    check(q, k, v, out, allow, s)
    assert isinstance(w, BlockWeights) and w.block == block and w.n == n
    assert w.index.dtype == torch.long and w.index.shape[1] == 2 and w.values.shape[:2] == (b, h)
    torch.testing.assert_close(w.to_dense(), ref_weights(q.detach(), k.detach(), allow, s), atol=1e-10, rtol=0)


def test_block_weights_to_dense_places_each_tile():
    # two tiles of a 2 × 2 block grid, n = 3 (the last block is cut): values written by hand
    vals = torch.arange(1, 17, dtype=torch.float64).reshape(1, 2, 2, 2, 2)  # (b, h, nnz, B, B)
    bw = BlockWeights(torch.tensor([[0, 1], [1, 0]]), vals, 2, 3)
    want = torch.zeros(1, 2, 4, 4, dtype=torch.float64)
    for hh in range(2):
        want[0, hh, 0:2, 2:4] = vals[0, hh, 0]
        want[0, hh, 2:4, 0:2] = vals[0, hh, 1]
    torch.testing.assert_close(bw.to_dense(), want[:, :, :3, :3], atol=0, rtol=0)


@pytest.mark.parametrize("shape", [(0, 2, 5, 4, 4), (1, 0, 5, 4, 4), (1, 2, 0, 4, 4), (1, 2, 5, 4, 0)])
def test_empty_inputs_give_empty_outputs_and_empty_weights(shape):
    b, h, n, d, dv = shape
    q = torch.randn(b, h, n, d, requires_grad=True)
    k = torch.randn(b, h, n, d, requires_grad=True)
    v = torch.randn(b, h, n, dv, requires_grad=True)
    out, w = block_sparse_attention(q, k, v, P.causal(), block=3, need_weights=True)
    assert out.shape == (b, h, n, dv)
    assert w.index.shape == (0, 2) and w.index.dtype == torch.long
    assert w.values.shape == (b, h, 0, 3, 3) and w.block == 3 and w.n == n
    assert w.to_dense().shape == (b, h, n, n)
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and bool((t.grad == 0).all())
    out, w = block_sparse_attention(q, k, v, P.causal(), block=3)
    assert w is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_are_computed_in_float32_and_cast_back(dtype):
    q, k, v = qkv(1, 2, 9, 4, seed=3, dtype=torch.float32)
    qh, kh, vh = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out, _ = block_sparse_attention(qh, kh, vh, P.sliding_window(2), block=4)
    assert out.dtype == dtype
    allow = P.sliding_window(2).materialize(9)
    want = ref_weights(qh.detach().double(), kh.detach().double(), allow, 0.5) @ vh.detach().double()
    torch.testing.assert_close(out.double(), want, atol=1e-2, rtol=0)
    out.float().sum().backward()
    assert qh.grad.dtype == dtype and bool(torch.isfinite(qh.grad.float()).all())


def test_dropout_drops_whole_weights_and_the_backward_replays_the_same_drops():
    # values = the identity (d_v = n ≠ d: the explicit path): the output is the dropped weight matrix itself
    n, p = 12, 0.5
    q, k, _ = qkv(1, 2, n, 4, seed=4)
    v = torch.eye(n, dtype=torch.float64).expand(1, 2, n, n).clone().requires_grad_()
    pattern = P.sliding_window(3, 2)
    outs = []
    for _ in range(2):
        out, _ = block_sparse_attention(q, k, v, pattern, block=4, dropout_p=p)
        outs.append(out)
        w = ref_weights(q.detach(), k.detach(), pattern.materialize(n), 0.5)
        kept = out.detach() != 0
        torch.testing.assert_close(out.detach()[kept], (w / (1 - p))[kept], atol=1e-12, rtol=0)
        assert 0 < int(kept.sum()) < int((w > 0).sum())  # some weights dropped, some kept
        g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
        (gv,) = torch.autograd.grad(out, (v,), g)
        torch.testing.assert_close(gv, out.detach().transpose(-1, -2) @ g, atol=1e-12, rtol=0)
    assert not torch.equal(outs[0], outs[1])  # each call draws its own drops


def test_dense_backend_on_cpu_gives_values_weights_and_gradients(monkeypatch):
    monkeypatch.setattr(devices, "backend_for", lambda device: "dense")
    n = 10
    q, k, v = qkv(2, 2, n, 4, dv=3, seed=6)
    real = torch.ones(2, n, dtype=torch.bool)
    real[1, 7:] = False
    pattern = P.sliding_window(2, 1) | P.global_tokens([4])
    out, w = block_sparse_attention(q, k, v, pattern, block=4, mask=real, scale=0.3, need_weights=True)
    allow = pattern.materialize(n) & real[:, None, None, :]
    check(q, k, v, out, allow, 0.3)
    torch.testing.assert_close(w.to_dense(), ref_weights(q.detach(), k.detach(), allow, 0.3), atol=1e-10, rtol=0)
    assert w.block == 4 and w.n == n and w.index.dtype == torch.long
    out, w = block_sparse_attention(q, k, v, pattern, block=4)
    assert w is None
    check(q, k, v, out, pattern.materialize(n), 0.5)


@pytest.mark.parametrize("pattern", [P.sliding_window(1, 1), P.strided(3), P.sliding_window(1, 0) | P.strided(4)], ids=repr)
def test_non_finite_inputs_reach_exactly_the_rows_that_may_attend_them(pattern):
    n = 9
    q, k, v = (t.detach() for t in qkv(2, 2, n, 4, seed=10))
    k[0, 1, 6] = float("nan")  # batch 0, head 1: key 6
    v[1, 0, 3] = float("-inf")  # batch 1, head 0: value 3
    q[0, 0, 2] = float("inf")  # a query that has keys: its row is NaN
    q[1, 1, 8] = float("inf")  # a query whose keys are all padded: its row stays zero
    real = torch.ones(2, n, dtype=torch.bool)
    real[1, 7:] = False
    real[0, 8] = False
    v[0, 0, 8] = float("nan")  # a padded value: never seen
    allow = pattern.materialize(n) & real[:, None, None, :]  # (2, 1, n, n) → (2, 2, n, n) below
    allow = allow.expand(2, 2, n, n)
    bad_kv = ~(torch.isfinite(k).all(-1) & torch.isfinite(v).all(-1)) & real[:, None, :]  # (2, 2, n)
    bad_q = ~torch.isfinite(q).all(-1)
    nan_rows = (allow & bad_kv[:, :, None, :]).any(-1) | (bad_q & allow.any(-1))
    assert bool(nan_rows[0, 0, 2]) and bool(nan_rows[1, 0].any())
    if isinstance(pattern, type(P.sliding_window(1, 1))):
        assert not bool(nan_rows[1, 1, 8])  # in the window its keys are 7 and 8, both padded
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, w = block_sparse_attention(q, k, v, pattern, block=4, mask=real, need_weights=True)
    assert torch.equal(torch.isnan(out).any(-1), nan_rows)
    assert torch.equal(torch.isnan(w.to_dense()).any(-1), nan_rows)
    q2, k2, v2 = (torch.where(torch.isfinite(t), t, 0.0).detach().requires_grad_() for t in (q, k, v))
    want = ref_weights(q2, k2, allow, 0.5) @ v2
    ok = (~nan_rows[..., None]).expand_as(want)
    torch.testing.assert_close(out.detach()[ok], want.detach()[ok], atol=1e-10, rtol=0)
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad(out, (q, k, v), g)
    ref = torch.autograd.grad(want, (q2, k2, v2), g.masked_fill(~ok, 0.0))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("n", [10, 65])  # 65: ⌈65/64⌉ = 2 tiles of the padding mask
def test_weights_for_rows_against_float64(n):
    q, k, _ = (t.detach() for t in qkv(2, 1, n, 4, seed=n))
    real = torch.ones(2, n, dtype=torch.bool)
    real[0, [1, n - 1]] = False
    pattern = P.sliding_window(3, 1) | P.global_tokens([0])
    rows = [0, 2, n - 1]
    for scale, pad in [(None, None), (0.8, real), (None, real.reshape(2, 1, 1, n))]:
        s = 1 / math.sqrt(4) if scale is None else scale
        allow = pattern.materialize(n)
        if pad is not None:
            allow = allow & real[:, None, None, :]
        want = ref_weights(q, k, allow, s)[:, :, rows]
        got = weights_for_rows(q, k, pattern, rows, mask=pad, scale=scale)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    got = weights_for_rows(q, k, pattern, torch.tensor(rows, dtype=torch.int32))
    torch.testing.assert_close(got, ref_weights(q, k, pattern.materialize(n), 0.5)[:, :, rows], atol=1e-12, rtol=0)


def test_fused_choice_and_layout_parts():
    assert bs._fused(4, 4, 0.0) is bs.HAS_FUSED
    assert not bs._fused(4, 4, 0.1) and not bs._fused(4, 5, 0.0)
    win, T, g, pl = bs._layout(Plan(P.sliding_window(2, 1) | P.global_tokens([1, 30]), 10, block=4), 2, False)
    assert (win.before, win.after) == (2, 1) and g.tolist() == [1] and pl is None
    win, T, g, pl = bs._layout(Plan(P.global_tokens([12]), 10, block=4), 2, False)  # beyond n: no global part
    assert win is None and g is None and pl is not None and not pl.groups
    win, T, g, pl = bs._layout(Plan(P.global_tokens([10]), 11, block=4), 2, False)  # the last position
    assert g.tolist() == [10]


def test_default_block_is_64_in_the_weights():
    q, k, v = qkv(1, 1, 70, 2, seed=12)
    _, w = block_sparse_attention(q, k, v, P.causal(), need_weights=True)
    assert w.block == 64 and w.values.shape[-2:] == (64, 64)


def test_a_single_position_attends_itself():
    # b = h = n = d = d_v = 1: the one query attends the one key, so the output is the value
    q, k, v = (torch.tensor([[[[x]]]], dtype=torch.float64, requires_grad=True) for x in (0.3, -1.2, 2.5))
    out, w = block_sparse_attention(q, k, v, P.causal(), block=2, need_weights=True)
    torch.testing.assert_close(out, v.detach(), atol=0, rtol=0)
    assert w.to_dense().tolist() == [[[[1.0]]]]
    out.sum().backward()
    assert v.grad.item() == 1.0 and q.grad.item() == 0.0 and k.grad.item() == 0.0


def test_dense_backend_on_cpu_drops_weights_and_gives_unpadded_weights(monkeypatch):
    monkeypatch.setattr(devices, "backend_for", lambda device: "dense")
    n, p = 12, 0.5
    q, k, _ = qkv(1, 2, n, 4, seed=13)
    v = torch.eye(n, dtype=torch.float64).expand(1, 2, n, n)  # the output is the (dropped) weight matrix
    pattern = P.sliding_window(3, 2)
    w = ref_weights(q.detach(), k.detach(), pattern.materialize(n), 0.5)
    out, bw = block_sparse_attention(q, k, v, pattern, block=4, dropout_p=p, need_weights=True)
    kept = out.detach() != 0
    torch.testing.assert_close(out.detach()[kept], (w / (1 - p))[kept], atol=1e-12, rtol=0)
    assert 0 < int(kept.sum()) < int((w > 0).sum())
    torch.testing.assert_close(bw.to_dense(), w, atol=1e-12, rtol=0)  # the weights themselves: not dropped


def test_half_inputs_whose_scores_overflow_float16_are_still_computed_in_float32():
    # q·k = 200·200·4 = 160 000 > 65 504 (float16's largest): in float32 every score is equal, so each
    # causal row averages the values it may attend
    q = torch.full((1, 1, 5, 4), 200.0, dtype=torch.float16)
    v = torch.randn(1, 1, 5, 3, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    for pattern, block in [(P.causal(), 2), (P.sliding_window(1, 0), 4)]:
        out, _ = block_sparse_attention(q, q, v, pattern, block=block)
        allow = pattern.materialize(5).double()
        want = (allow / allow.sum(-1, keepdim=True)) @ v.double()[0, 0]
        assert out.dtype == torch.float16
        torch.testing.assert_close(out.double()[0, 0], want, atol=2e-3, rtol=0)
