"""Kernels: the fused parts of ``block_sparse_attention`` (global tokens, window spans) with key padding.

Reference: masked softmax attention and its gradients in float64 NumPy, written here from the
equations (S = scale·QKᵀ on allowed pairs, P = softmax over them, 0 on a row with none, O = PV;
dV = PᵀdO, dS = P∘(dO Vᵀ − rowsum(P∘dO Vᵀ)), dQ = scale·dS K, dK = scale·dSᵀQ), with the
allowed pairs from a Python loop over the pattern's rule written by hand.
"""

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention


def np_attention_and_grads(q, k, v, allow, scale, dout):
    """q, k, v, dout (b, h, n, d) float64; allow (b, n, n) bool → out, dq, dk, dv."""
    s = scale * q @ np.swapaxes(k, -1, -2)
    a = allow[:, None]
    s = np.where(a, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(a, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    out = p @ v
    dv = np.swapaxes(p, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    return out, scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv


def rule_mask(rule, n, real):
    """(b, n, n): rule(i, j) for each pair, and key j real."""
    b = real.shape[0]
    allow = np.zeros((b, n, n), dtype=bool)
    for bi in range(b):
        for i in range(n):
            for j in range(n):
                allow[bi, i, j] = bool(rule(i, j)) and bool(real[bi, j])
    return allow


N = 11
GLOBAL = (0, 5)
CASES = {
    # name: (pattern, rule written by hand)
    "globals_alone": (lambda: P.global_tokens(list(GLOBAL)), lambda i, j: i in GLOBAL or j in GLOBAL),
    "window_and_globals": (
        lambda: P.sliding_window(1, 2) | P.global_tokens(list(GLOBAL)),
        lambda i, j: -1 <= j - i <= 2 or i in GLOBAL or j in GLOBAL,
    ),
    "every_position_global": (lambda: P.global_tokens(range(N)), lambda i, j: True),
    "globals_and_strided": (
        lambda: P.global_tokens(list(GLOBAL)) | P.strided(4),
        lambda i, j: i in GLOBAL or j in GLOBAL or abs(i - j) < 4 or (i - j) % 4 == 0,
    ),
    "window_alone": (lambda: P.sliding_window(2, 1), lambda i, j: -2 <= j - i <= 1),
}


def padding():
    real = np.ones((3, N), dtype=bool)
    real[0, N - 2 :] = False  # a shorter sequence
    real[1, list(GLOBAL)] = False  # the global keys padded: the other rows have no key in the global part
    real[2] = False  # every key padded: every row has no key anywhere
    return real


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_fused_parts_equal_numpy_outputs_and_gradients(name, padded):
    make, rule = CASES[name]
    g = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(3, 2, N, 3, dtype=torch.float64, generator=g) for _ in range(4))
    real = padding() if padded else np.ones((3, N), dtype=bool)
    scale = 0.6
    want = np_attention_and_grads(q.numpy(), k.numpy(), v.numpy(), rule_mask(rule, N, real), scale, dout.numpy())
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, _ = block_sparse_attention(
        q, k, v, make(), block=4, scale=scale, mask=torch.from_numpy(real) if padded else None
    )
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    for name_, a, w in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a.detach().numpy(), w, atol=1e-12, rtol=0, err_msg=name_)


# --- the window kernel itself (band_forward / band_backward), tile by tile under small budgets ------


@pytest.mark.parametrize("budgets", ["default", "one_tile_per_call"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("before, after", [(2, 1), (0, 5), (6, 0)])
def test_band_kernel_equals_numpy_under_small_budgets(monkeypatch, before, after, padded, budgets):
    """T = 3 query tiles over n = 11 (the last one cut): boundary tiles at both ends and interior ones.
    With one tile per call (SPAN_BUDGET, MASK_BUDGET = 1) every call covers one tile."""
    from attnlab.kernels import band

    if budgets == "one_tile_per_call":
        monkeypatch.setattr(band, "SPAN_BUDGET", 1)
        monkeypatch.setattr(band, "MASK_BUDGET", 1)
    b, h, n, d, T, scale = 3, 2, N, 3, 3, 0.6
    g = torch.Generator().manual_seed(11)
    q, k, v, dout = (torch.randn(b, h, n, d, dtype=torch.float64, generator=g) for _ in range(4))
    real = padding() if padded else np.ones((b, n), dtype=bool)
    if padded:  # as block_sparse_attention hands them over: padded keys and values zeroed
        r = torch.from_numpy(real)[:, None, :, None]
        k, v = k.masked_fill(~r, 0.0), v.masked_fill(~r, 0.0)
    allow = rule_mask(lambda i, j: -before <= j - i <= after, n, real)
    want_out, want_dq, want_dk, want_dv = np_attention_and_grads(q.numpy(), k.numpy(), v.numpy(), allow, scale, dout.numpy())
    out, lse = band.band_forward(q, k, v, before, after, torch.from_numpy(real) if padded else None, scale, T)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12, rtol=0)
    alive = allow.any(-1)[:, None, :]  # (b, 1, n)
    assert np.array_equal(np.isneginf(lse.numpy()), np.broadcast_to(~alive, lse.shape))
    dead = torch.from_numpy(~alive)
    dq, dk, dv = band.band_backward(
        dout.masked_fill(dead[..., None], 0.0), q, k, v, out, lse.masked_fill(dead, 0.0),
        before, after, torch.from_numpy(real) if padded else None, scale, T,
    )
    for name_, a, w in (("dq", dq, want_dq), ("dk", dk, want_dk), ("dv", dv, want_dv)):
        np.testing.assert_allclose(a.numpy(), w, atol=1e-12, rtol=0, err_msg=name_)


# n = 11, T = 3 → nt = 4 query tiles; before = 2, after = 1 → L = 6 keys per span. Without padding the
# calls follow the segments: tile 0 reaches before key 0, tiles 1–2 are interior, tile 3 passes n.
# One tile's span elements: b·h·L·d = 3·2·6·3 = 108 for all batch elements, h·L·d = 36 for one.
NO_PAD_CALLS = {
    None: [(None, 0, 1), (None, 1, 3), (None, 3, 4)],  # no budget: each segment in one call
    250: [(None, 0, 1), (None, 1, 3), (None, 3, 4)],  # 2 tiles fit (216 <= 250 < 324)
    150: [(None, 0, 1), (None, 1, 2), (None, 2, 3), (None, 3, 4)],  # 1 tile fits
    50: [(None, 0, 1), (None, 1, 2), (None, 2, 3), (None, 3, 4)],  # not even one: still one tile a call
}
PAD_CALLS = {  # (span budget, mask budget) → the calls of each batch element (a tile's mask has T·L = 18 elements)
    (None, 1 << 22): [(0, 4)],
    (250, 1 << 22): [(0, 4)],  # 6 tiles fit (216 <= 250)
    (80, 1 << 22): [(0, 2), (2, 4)],  # 2 tiles fit (72 <= 80 < 108)
    (30, 1 << 22): [(0, 1), (1, 2), (2, 3), (3, 4)],
    (None, 40): [(0, 2), (2, 4)],  # the mask budget: 2 tiles (36 <= 40 < 54)
    (None, 10): [(0, 1), (1, 2), (2, 3), (3, 4)],  # not even one tile's mask: one a call
}


@pytest.mark.parametrize("budget", list(NO_PAD_CALLS))
def test_band_calls_without_padding_cover_each_tile_once_within_the_budget(budget):
    from attnlab.kernels import band

    calls = list(band._calls(N, 4, 3, 2, 1, None, 3, 2, 3, torch.device("cpu"), budget))
    assert [c[:3] for c in calls] == NO_PAD_CALLS[budget]
    for _, s, e, allow, dead in calls:
        assert dead is None and allow.shape == ((3, 6) if 1 <= s < 3 else (e - s, 3, 6))  # interior: one shared mask


@pytest.mark.parametrize("budgets", list(PAD_CALLS))
def test_band_calls_with_padding_cover_each_tile_once_per_batch_element_within_the_budgets(monkeypatch, budgets):
    from attnlab.kernels import band

    span, mask = budgets
    monkeypatch.setattr(band, "MASK_BUDGET", mask)
    real = torch.from_numpy(padding())
    calls = list(band._calls(N, 4, 3, 2, 1, real, 3, 2, 3, torch.device("cpu"), span))
    want = [(bi, s, e) for bi in range(3) for s, e in PAD_CALLS[budgets]]
    assert [c[:3] for c in calls] == want
    for _, s, e, allow, dead in calls:
        assert allow.shape == (e - s, 3, 6) and torch.equal(dead, ~allow.any(-1))


def test_band_calls_when_the_first_tile_ends_exactly_where_the_last_span_may_end():
    """n = 4, T = 3, before = 0, after = 1: tile 0's span (keys 0..3) fits exactly (n − after − T = 0),
    so it is interior (one shared (T, L) mask); tile 1 passes n."""
    from attnlab.kernels import band

    calls = list(band._calls(4, 2, 3, 0, 1, None, 1, 1, 2, torch.device("cpu")))
    assert [c[:3] for c in calls] == [(None, 0, 1), (None, 1, 2)]
    assert calls[0][3].shape == (3, 4) and calls[1][3].shape == (1, 3, 4)
    # tile 0: query r sees keys r, r + 1; tile 1 (queries 3..5, keys 3..6): only query 3, keys 3 (and 4 ≥ n: no)
    assert calls[0][3].tolist() == [[True, True, False, False], [False, True, True, False], [False, False, True, True]]
    assert calls[1][3][0].tolist() == [[True, False, False, False], [False] * 4, [False] * 4]


def test_query_tile_is_the_block_for_inference_and_at_least_256_with_autograd():
    from attnlab.kernels.band import query_tile

    assert [query_tile(4, False), query_tile(4, True), query_tile(300, True), query_tile(300, False)] == [4, 256, 300, 300]


def test_span_positions_of_tiles_by_hand():
    from attnlab.kernels.band import _span_positions

    # T = 3, before = 2, after = 1: tile t covers keys 3t − 2 … 3t + 3
    assert _span_positions(1, 3, 3, 2, 1).tolist() == [[1, 2, 3, 4, 5, 6], [4, 5, 6, 7, 8, 9]]
    assert _span_positions(0, 1, 3, 2, 1).tolist() == [[-2, -1, 0, 1, 2, 3]]
