"""Block-sparse layout and forward: checks that a mutation run found missing.

What is pinned: which parts the fused path builds (`_layout`: window, query tile, global rows, plan),
that the plan is the one cached for the caller's b·h, the dropout seed's contract (0 without dropout,
an int32-positive draw with it), the lse placeholder of the tiled path, and the all-empty layout's zero
output. References: the masks written by hand; float64 NumPy softmax attention and its log-sum-exp.
"""

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import band, tiles
from attnlab.kernels import block_sparse as bs
from attnlab.kernels.block_sparse import _forward, _layout, block_sparse_attention
from attnlab.kernels.parts import split
from attnlab.kernels.tiles import plan

import np_reference as ref


def test_layout_of_a_window_alone_has_no_plan_and_the_grad_query_tile():
    win, T, g, pl = _layout(P.sliding_window(1), 4, 2, 6, True)
    assert (win.before, win.after, g, pl) == (1, 1, None, None)
    assert T == 256  # with autograd the query tile is at least 256
    assert _layout(P.sliding_window(1), 4, 2, 6, False)[1] == 2


def test_layout_of_global_tokens_alone_has_no_plan():
    win, _, g, pl = _layout(P.global_tokens([1]), 4, 2, 6, False)
    assert win is None and pl is None and g.tolist() == [1]


def test_layout_drops_a_rest_inside_the_window():
    # window(1) adds no key beyond window(2): no plan part
    win, _, g, pl = _layout(P.sliding_window(2) | P.sliding_window(1), 4, 2, 6, False)
    assert (win.before, g, pl) == (2, None, None)


def test_layout_drops_a_rest_inside_the_global_tokens():
    # every token is global: causal adds no key
    win, _, g, pl = _layout(P.global_tokens([0, 1, 2, 3]) | P.causal(), 4, 2, 6, False)
    assert win is None and pl is None and g.tolist() == [0, 1, 2, 3]


def test_layout_plans_the_rest_for_the_callers_bh():
    pattern = P.global_tokens([1]) | P.causal()
    _, _, g, pl = _layout(pattern, 4, 2, 6, False)
    rest = split(pattern)[2]
    assert g.tolist() == [1]
    assert pl is plan(rest, 4, 2, 6)  # the cached plan for (n, block, b·h) = (4, 2, 6)


def test_layout_with_nothing_left_plans_the_whole_pattern():
    pattern = P.global_tokens([9])  # no global token below n = 4, no window, no rest
    win, _, g, pl = _layout(pattern, 4, 2, 6, False)
    assert win is None and g is None
    assert pl is plan(pattern, 4, 2, 6) and not pl.groups


def _qkv(b, h, n, d, dv=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=gen), torch.randn(b, h, n, d, generator=gen),
            torch.randn(b, h, n, d if dv is None else dv, generator=gen))


def test_forward_with_no_key_anywhere_is_zero_with_lse_minus_inf():
    q, k, v = _qkv(1, 1, 4, 3)
    out, lse, seed = _forward(q, k, v, None, P.global_tokens([9]), 2, 0.5, 0.0, False)
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
    out, lse, seed = _forward(q, k, v, None, pattern, 2, 0.5, 0.0, False)
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
    _forward(q, k, v, None, pattern, 2, 0.5, 0.0, False)
    assert (4, 2, 6) in tiles._PLANS[split(pattern)[2]]


def test_forward_tiled_without_dropout_has_seed_zero_an_empty_lse_and_plans_for_b_times_h():
    pattern = P.causal()
    q, k, v = _qkv(2, 3, 4, 3, dv=2)  # d_v != d: the tiled path
    state = torch.get_rng_state()
    out, lse, seed = _forward(q, k, v, None, pattern, 2, 0.5, 0.0, False)
    assert seed == 0 and lse.shape == (0,)
    assert torch.equal(torch.get_rng_state(), state)  # no draw without dropout
    assert (4, 2, 6) in tiles._PLANS[pattern]
    allow = pattern.materialize(4).numpy()
    want, _ = ref.attention_lse(q[1, 2].double().numpy(), k[1, 2].double().numpy(), v[1, 2].double().numpy(),
                               allow, 0.5)
    np.testing.assert_allclose(out[1, 2].numpy(), want, atol=1e-5)


def test_forward_dropout_seeds_fit_a_positive_int32():
    q, k, v = _qkv(1, 1, 4, 2)
    seeds = [_forward(q, k, v, None, P.causal(), 2, 0.5, 0.5, False)[2] for _ in range(24)]
    assert all(0 <= s < 2**31 - 1 for s in seeds)
    assert len(set(seeds)) > 1


def test_need_weights_plans_for_b_times_h():
    pattern = P.sliding_window(1) | P.causal()  # the fused path plans only the rest; the weights the whole
    q, k, v = _qkv(2, 3, 4, 3)
    _, w = block_sparse_attention(q, k, v, pattern, block=2, need_weights=True)
    assert (4, 2, 6) in tiles._PLANS[pattern]
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
    assert (4, 2, 6) in tiles._PLANS[pattern]
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
