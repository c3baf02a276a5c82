"""The tile kernels called directly (``attnlab.kernels.tiles``), against float64 NumPy written here:

    s_ij = scale · q_i·k_j  where pattern(i, j) and key j is real, else −∞
    p_ij = softmax_j(s_ij) (a row with no key: 0),  o_i = Σ_j p_ij v_j
    dv = pᵀ dO,  dP = dO vᵀ,  dS = p ∘ (dP − rowsum(dP ∘ p)),  dq = scale · dS k,  dk = scale · dSᵀ q
    ℓ_i = log Σ_j exp(s_ij) (−∞ on a row with no key)

With dropout (keep mask κ, rate p): p' = p ∘ κ / (1 − p), o = p' v, dv = p'ᵀ dO, dP = (dO vᵀ) ∘ κ / (1 − p).
The mask is read back from the forward with v = I (then o = p'), so the backward is checked against the
same draw. The pattern is a fixed boolean table (``Table``): rows with no key, query blocks with no
key block, uneven key blocks per row (padded slots), lengths that are not a multiple of the block.
"""

import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import tiles
from attnlab.patterns import Pattern


class Table(Pattern):
    """An arbitrary (n, n) bool mask as a pattern: allows(i, j) = table[i, j] (False outside)."""

    def __init__(self, table):
        self.table = torch.as_tensor(table, dtype=torch.bool)

    def allows(self, q_idx, kv_idx, n):
        t = self.table.shape[0]
        qi, ki = torch.broadcast_tensors(q_idx, kv_idx)
        inside = (qi < t) & (ki < t)
        return self.table[qi.clamp(max=t - 1), ki.clamp(max=t - 1)] & inside


def table(n, seed, density=0.35, dead_rows=(), empty_block=None, block=4):
    rng = np.random.default_rng(seed)
    t = rng.random((n, n)) < density
    t[np.arange(n), np.arange(n)] = True  # most rows have a key...
    for r in dead_rows:
        t[r] = False  # ...these have none
    if empty_block is not None:  # a query block with no key block at all
        t[empty_block * block : (empty_block + 1) * block] = False
    # a dense tile beside sparse ones: rows with more key blocks than others
    t[:block, :] |= rng.random((block, n)) < 0.8
    return t


def np_forward(q, k, v, allow, scale, keep=None):
    """q, k (b, h, n, d), v (b, h, n, dv), allow (b, 1, n, n) → out, lse, weights p (before dropout)."""
    s = np.where(allow, scale * q @ np.swapaxes(k, -1, -2), -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allow, np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    lse = np.where(z[..., 0] > 0, np.log(np.where(z[..., 0] > 0, z[..., 0], 1.0)) + m[..., 0], -np.inf)
    pd = p if keep is None else p * keep
    return pd @ v, lse, p


def np_backward(dout, q, k, v, p, scale, keep=None):
    pd = p if keep is None else p * keep
    dv = np.swapaxes(pd, -1, -2) @ dout
    dp = dout @ np.swapaxes(v, -1, -2)
    if keep is not None:
        dp = dp * keep
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv


def inputs(b, h, n, d, dv, seed, strided=False):
    g = torch.Generator().manual_seed(seed)
    if strided:  # (b, n, h, d) seen as (b, h, n, d): not contiguous
        q, k = (torch.randn(b, n, h, d, generator=g, dtype=torch.float64).transpose(1, 2) for _ in range(2))
        v = torch.randn(b, n, h, dv, generator=g, dtype=torch.float64).transpose(1, 2)
    else:
        q, k = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(2))
        v = torch.randn(b, h, n, dv, generator=g, dtype=torch.float64)
    dout = torch.randn(b, h, n, dv, generator=g, dtype=torch.float64)
    return q, k, v, dout


def padding(b, n):
    real = torch.ones(b, n, dtype=torch.bool)
    real[0, n - 3 :] = False  # a shorter first sequence
    if b > 1:
        real[1, 2:5] = False  # holes in the second
    return real


def dense_allow(pattern, n, real, b):
    allow = pattern.materialize(n).numpy()[None, None]  # (1, 1, n, n)
    if real is None:
        return np.broadcast_to(allow, (b, 1, n, n))
    return allow & real.numpy()[:, None, None, :]


CASES = {
    # name: (n, block, b, h, dead rows, empty query block, key padding, budget)
    "ragged": (13, 4, 2, 2, (5,), None, True, None),
    "ragged-no-pad": (13, 4, 1, 2, (6, 9), 2, False, None),
    "one-group-per-row": (13, 4, 2, 1, (5,), 1, True, 1),
    "two-rows-per-group": (15, 4, 1, 2, (), None, True, 2 * 2 * 4 * 4 * 4),
    "whole-blocks": (16, 4, 2, 1, (3,), None, True, None),
}

SCALE = 0.37


def build(name):
    n, B, b, h, dead, empty, pad, budget = CASES[name]
    pattern = Table(table(n, seed=len(name), dead_rows=dead, empty_block=empty, block=B))
    real = padding(b, n) if pad else None
    return pattern, n, B, b, h, real, budget


def make_plan(monkeypatch, pattern, n, B, bh, budget):
    if budget is not None:
        monkeypatch.setattr(tiles, "SCORE_BUDGET", budget)
    return tiles.plan(pattern, n, B, bh)


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_fused_plan_forward_and_backward_match_dense_numpy(name, strided, monkeypatch):
    pattern, n, B, b, h, real, budget = build(name)
    pl = make_plan(monkeypatch, pattern, n, B, b * h, budget)
    q, k, v, dout = inputs(b, h, n, 3, 3, seed=1, strided=strided)
    nb = -(-n // B)
    keys = tiles._key_real(real, b, n, nb, B, "cpu")
    allow = dense_allow(pattern, n, real, b)
    want, want_lse, p = np_forward(q.numpy(), k.numpy(), v.numpy(), allow, SCALE)
    out, lse = tiles.plan_forward(q, k, v, pl, keys, SCALE)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-10)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-10)
    dead = ~allow.any(-1)  # (b, 1, n)
    dout = dout.masked_fill(torch.from_numpy(dead)[..., None], 0.0)  # the contract: no gradient into those rows
    fin = lse.masked_fill(torch.isneginf(lse), 0.0)
    got = tiles.plan_backward(dout, q, k, v, out, fin, pl, keys, SCALE)
    for a, w in zip(got, np_backward(dout.numpy(), q.numpy(), k.numpy(), v.numpy(), p, SCALE)):
        assert a.shape == (b, h, n, 3)
        np.testing.assert_allclose(a.numpy(), w, atol=1e-10)


@pytest.mark.parametrize("dv", [2, 5])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_explicit_tiles_forward_and_backward_match_dense_numpy(name, strided, dv, monkeypatch):
    pattern, n, B, b, h, real, budget = build(name)
    pl = make_plan(monkeypatch, pattern, n, B, b * h, budget)
    q, k, v, dout = inputs(b, h, n, 3, dv, seed=2, strided=strided)
    nb = -(-n // B)
    keys = tiles._key_real(real, b, n, nb, B, "cpu")
    allow = dense_allow(pattern, n, real, b)
    want, _, p = np_forward(q.numpy(), k.numpy(), v.numpy(), allow, SCALE)
    out = tiles.tiles_forward(q, k, v, pl, keys, SCALE, 0.0, 0)
    assert out.shape == (b, h, n, dv) and out.is_contiguous()
    np.testing.assert_allclose(out.numpy(), want, atol=1e-10)
    # no masking of dout here: the explicit backward zeroes the rows with no key itself
    got = tiles.tiles_backward(dout, q, k, v, out, pl, keys, SCALE, 0.0, 0)
    for a, w, d in zip(got, np_backward(dout.numpy(), q.numpy(), k.numpy(), v.numpy(), p, SCALE), (3, 3, dv)):
        assert a.shape == (b, h, n, d) and a.is_contiguous()
        np.testing.assert_allclose(a.numpy(), w, atol=1e-10)


@pytest.mark.parametrize("name", ["ragged", "one-group-per-row", "two-rows-per-group"])
def test_explicit_path_with_dropout_rescales_kept_weights_and_replays_the_mask(name, monkeypatch):
    pattern, n, B, b, h, real, budget = build(name)
    pl = make_plan(monkeypatch, pattern, n, B, b * h, budget)
    q, k, _, _ = inputs(b, h, n, 3, 3, seed=3)
    eye = torch.eye(n, dtype=torch.float64).expand(b, h, n, n).contiguous()  # v = I: the output is p'
    nb = -(-n // B)
    keys = tiles._key_real(real, b, n, nb, B, "cpu")
    allow = dense_allow(pattern, n, real, b)
    rate = 0.3
    _, _, p = np_forward(q.numpy(), k.numpy(), eye.numpy(), allow, SCALE)
    w = tiles.tiles_forward(q, k, eye, pl, keys, SCALE, rate, 1234).numpy()
    kept = w != 0
    assert not (kept & ~allow).any()  # dropout never opens a masked pair
    np.testing.assert_allclose(w[kept], p[kept] / (1 - rate), rtol=1e-6)  # kept weights scaled by 1/(1-p) (float32 factor)
    drop = 1 - kept[np.broadcast_to(allow, kept.shape)].mean()
    assert abs(drop - rate) < 0.15, drop  # a few hundred pairs; the rate is checked closely below
    # the same seed: the same mask; another seed: another one
    again = tiles.tiles_forward(q, k, eye, pl, keys, SCALE, rate, 1234).numpy()
    np.testing.assert_array_equal(again, w)
    other = tiles.tiles_forward(q, k, eye, pl, keys, SCALE, rate, 99).numpy()
    assert (other != w).any()
    # the backward replays the forward's mask (read from w), with any v
    g = torch.Generator().manual_seed(4)
    v = torch.randn(b, h, n, 2, generator=g, dtype=torch.float64)
    dout = torch.randn(b, h, n, 2, generator=g, dtype=torch.float64)
    keep = kept / (1 - rate)
    out = tiles.tiles_forward(q, k, v, pl, keys, SCALE, rate, 1234)
    want, _, _ = np_forward(q.numpy(), k.numpy(), v.numpy(), allow, SCALE, keep)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-10)
    got = tiles.tiles_backward(dout, q, k, v, out, pl, keys, SCALE, rate, 1234)
    for a, e in zip(got, np_backward(dout.numpy(), q.numpy(), k.numpy(), v.numpy(), p, SCALE, keep)):
        np.testing.assert_allclose(a.numpy(), e, atol=1e-10)


def test_dropout_mean_is_preserved_and_the_rate_matches():
    """Over a full pattern the kept weights sum, on average, to 1 per row (p' is unbiased)."""
    n, B, rate = 48, 8, 0.25
    pl = tiles.plan(P.full(), n, B, 1)
    q = torch.zeros(1, 1, n, 2, dtype=torch.float64)  # equal scores: p = 1/n everywhere
    eye = torch.eye(n, dtype=torch.float64)[None, None]
    w = tiles.tiles_forward(q, q, eye, pl, None, 1.0, rate, 7)[0, 0].numpy()
    kept = w != 0
    assert abs(kept.mean() - (1 - rate)) < 0.03
    np.testing.assert_allclose(w[kept], 1 / n / (1 - rate), rtol=1e-6)
    assert abs(w.sum() / n - 1) < 0.03  # mean row sum 1, within ~3 standard errors


def test_dropout_keep_draws_values_zero_or_one_over_keep_and_depends_on_seed_and_group():
    a = tiles._dropout_keep((200, 50), 0.2, 5, 0)
    assert a.dtype == torch.float32 and a.shape == (200, 50)
    assert a.unique().tolist() == [0.0, 1.25]
    assert abs(float((a == 0).float().mean()) - 0.2) < 0.02
    assert torch.equal(a, tiles._dropout_keep((200, 50), 0.2, 5, 0))
    assert not torch.equal(a, tiles._dropout_keep((200, 50), 0.2, 6, 0))  # another seed
    assert not torch.equal(a, tiles._dropout_keep((200, 50), 0.2, 5, 1))  # another group
    assert not torch.equal(tiles._dropout_keep((200, 50), 0.2, 6, 1), tiles._dropout_keep((200, 50), 0.2, 5, 1))


def test_plan_of_a_table_pattern_lists_its_tiles_and_counts_its_pairs(monkeypatch):
    n, B = 13, 4
    t = table(n, seed=11, dead_rows=(5,), empty_block=2, block=B)
    pattern = Table(t)
    monkeypatch.setattr(tiles, "SCORE_BUDGET", 3 * 4 * 4 * 2)  # 2 rows a group at m = 3 (bh = 3)
    pl = tiles.plan(pattern, n, B, 3)
    assert tiles.plan(pattern, n, B, 3) is not pl  # built anew: a Plan holds what it keeps
    nb = 4
    assert (pl.n, pl.block, pl.n_blocks) == (n, B, nb)
    pad = np.zeros((nb * B, nb * B), dtype=bool)
    pad[:n, :n] = t
    tile = pad.reshape(nb, B, nb, B).any(3).any(1)  # (nb, nb) non-empty tiles
    assert pl.nnz_blocks == int(tile.sum())
    assert pl.allowed == int(t.sum())
    seen = []
    for grp in pl.groups:
        R, m = grp.k_blocks.shape
        assert grp.q_blocks.shape == (R,) and grp.valid.shape == (R, m)
        for r, qb in enumerate(grp.q_blocks.tolist()):
            seen.append(qb)
            want = np.flatnonzero(tile[qb]).tolist()
            assert grp.k_blocks[r][grp.valid[r]].tolist() == want  # its key blocks, in order
            assert grp.k_blocks[r][~grp.valid[r]].tolist() == [0] * (m - len(want))  # padded with block 0
            assert int(grp.valid[r].sum()) == len(want)
            el = np.zeros((B, m * B), dtype=bool)
            for s, kb in enumerate(want):
                el[:, s * B : (s + 1) * B] = pad[qb * B : (qb + 1) * B, kb * B : (kb + 1) * B]
            got = np.ones((B, m * B), dtype=bool) if grp.allow is None else grp.allow[r].numpy()
            np.testing.assert_array_equal(got, el)
            dead = ~el.any(-1)
            got_dead = np.zeros(B, dtype=bool) if grp.dead is None else grp.dead[0, 0, r, :, 0].numpy()
            np.testing.assert_array_equal(got_dead, dead)
        if grp.allow is None:
            assert grp.bias is None
        else:
            assert grp.bias.shape == (1, R, B, m * B) and grp.bias.dtype == torch.float32
            np.testing.assert_array_equal(grp.bias[0].numpy(), np.where(grp.allow.numpy(), 0.0, -np.inf))
        assert grp.dead is None or bool(grp.dead.any())
        counts = grp.valid.sum(1)
        assert int(counts.max()) == m  # padded to the widest row of the group, no wider
    assert sorted(seen) == [i for i in range(nb) if tile[i].any()]  # each non-empty query block once
    assert 2 not in seen  # the query block with no key block is left out
    per_group = [len(g.q_blocks) for g in pl.groups]
    assert max(per_group) <= 2 and len(pl.groups) >= 2
    widths = [g.k_blocks.shape[1] for g in pl.groups]
    assert widths == sorted(widths)  # rows sorted by their count


def test_plan_of_a_full_pattern_has_no_masks():
    pl = tiles.plan(P.full(), 16, 4, 2)
    assert len(pl.groups) == 1
    (grp,) = pl.groups
    assert grp.allow is None and grp.bias is None and grp.dead is None
    assert grp.q_blocks.tolist() == [0, 1, 2, 3]
    assert grp.k_blocks.tolist() == [[0, 1, 2, 3]] * 4
    assert bool(grp.valid.all())
    assert (pl.nnz_blocks, pl.allowed) == (16, 256)


def test_plan_widens_a_group_to_the_largest_count_it_takes(monkeypatch):
    """Counts 1, 2, 3, 4 by row (causal over 4 blocks), B = 4, a budget of 8 key blocks of 4 × 4 scores."""
    monkeypatch.setattr(tiles, "SCORE_BUDGET", 8 * 4 * 4)
    pl = tiles.plan(P.causal(), 16, 4, 1)
    got = [(g.q_blocks.tolist(), g.k_blocks.shape[1]) for g in pl.groups]
    # row 0: m = 1 → 8 rows → all 4, widened to m = 4 → 2 rows → rows 0, 1 at m = 2; then rows 2, 3 at m = 4
    assert got == [([0, 1], 2), ([2, 3], 4)]
    assert [g.valid.tolist() for g in pl.groups] == [[[True, False], [True, True]],
                                                     [[True, True, True, False], [True, True, True, True]]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bias_is_the_additive_mask_of_allow_and_padding(dtype):
    n, B, b, h = 13, 4, 2, 3
    pattern = Table(table(n, seed=5, dead_rows=(5,), block=B))
    pl = tiles.plan(pattern, n, B, b * h)
    (grp,) = pl.groups
    R, m = grp.k_blocks.shape
    got = tiles._bias(grp, None, b, h, dtype)
    assert got.dtype == dtype and got.shape == (1, R, B, m * B)
    np.testing.assert_array_equal(got[0].numpy(), np.where(grp.allow.numpy(), 0.0, -np.inf))
    real = padding(b, n)
    keys = tiles._key_real(real, b, n, 4, B, "cpu")
    got = tiles._bias(grp, keys, b, h, dtype)
    assert got.dtype == dtype and got.shape == (b * h, R, B, m * B)
    kr = keys[:, grp.k_blocks].flatten(2).numpy()  # (b, R, m·B)
    for bi in range(b):
        want = np.where(grp.allow.numpy() & kr[bi][:, None, :], 0.0, -np.inf)
        for hi in range(h):
            np.testing.assert_array_equal(got[bi * h + hi].numpy(), want)
    full = tiles.plan(P.full(), 8, 4, b * h).groups[0]
    assert tiles._bias(full, None, b, h, dtype) is None
    got = tiles._bias(full, keys[:, :2], b, h, dtype)
    want = np.where(keys[:, :2][:, full.k_blocks].flatten(2).numpy()[:, :, None, :], 0.0, -np.inf)
    assert got.shape == (b * h, 2, 1, 8)  # no pattern mask: one row per tile, broadcast over its B queries
    np.testing.assert_array_equal(got.numpy(), np.repeat(want, h, 0))


def test_dead_marks_rows_with_no_allowed_real_key():
    n, B = 8, 4
    t = np.eye(n, dtype=bool)
    t[1] = False  # no key at all
    t[6, 2] = True
    pattern = Table(t)
    (grp,) = tiles.plan(pattern, n, B, 1).groups
    assert grp.dead[0, 0].squeeze(-1).tolist() == [[False, True, False, False], [False, False, False, False]]
    assert tiles._dead(grp, None) is grp.dead
    real = torch.tensor([[True] * 8, [True, True, False, True, True, True, False, True]])
    keys = tiles._key_real(real, 2, n, 2, B, "cpu")
    got = tiles._dead(grp, keys)
    assert got.shape == (2, 1, 2, B, 1)
    want = ~(t[None] & real.numpy()[:, None, :]).any(-1)  # (b, n)
    np.testing.assert_array_equal(got[:, 0, :, :, 0].reshape(2, n).numpy(), want)
    full = tiles.plan(P.full(), n, B, 1).groups[0]
    assert tiles._dead(full, None) is None
    none_real = torch.zeros(1, n, dtype=torch.bool)
    assert bool(tiles._dead(full, tiles._key_real(none_real, 1, n, 2, B, "cpu")).all())
    assert not bool(tiles._dead(full, keys).any())


def test_softmax_zeroes_rows_with_no_key():
    s = torch.tensor([[[0.0, float("-inf"), 1.0], [float("-inf")] * 3]])
    dead = torch.tensor([[[False], [True]]])
    got = tiles._softmax(s.clone(), dead)
    e = np.exp([0.0, 1.0])
    np.testing.assert_allclose(got[0, 0].numpy(), [e[0] / e.sum(), 0.0, e[1] / e.sum()], rtol=1e-6)
    assert got[0, 1].tolist() == [0.0, 0.0, 0.0]
    assert torch.isnan(tiles._softmax(s.clone(), None)[0, 1]).all()  # no rows given: left as softmax gives
    np.testing.assert_allclose(tiles._softmax(s[:, :1].clone(), None)[0, 0].numpy(), got[0, 0].numpy())


def test_scores_mask_disallowed_pairs_and_padded_keys():
    n, B = 8, 4
    t = np.tril(np.ones((n, n), dtype=bool))
    pattern = Table(t)
    (grp,) = tiles.plan(pattern, n, B, 1).groups
    g = torch.Generator().manual_seed(0)
    qg = torch.randn(1, 1, 2, B, 3, generator=g, dtype=torch.float64)
    kg = torch.randn(1, 1, 2, grp.k_blocks.shape[1] * B, 3, generator=g, dtype=torch.float64)
    got = tiles._scores(qg, kg, grp, None, B).numpy()
    raw = (qg @ kg.transpose(-1, -2)).numpy()
    np.testing.assert_array_equal(got, np.where(grp.allow.numpy()[None, None], raw, -np.inf))
    real = torch.tensor([[True, False, True, True, True, True, False, True]])
    keys = tiles._key_real(real, 1, n, 2, B, "cpu")
    got = tiles._scores(qg, kg, grp, keys, B).numpy()
    kr = keys[:, grp.k_blocks].flatten(2).numpy()[:, None, :, None, :]
    np.testing.assert_array_equal(got, np.where(grp.allow.numpy()[None, None] & kr, raw, -np.inf))


def test_blocks_pads_to_whole_blocks_with_zeros():
    x = torch.arange(2 * 1 * 5 * 3, dtype=torch.float64).reshape(2, 1, 5, 3)
    got = tiles._blocks(x, 2, 4)
    assert got.shape == (2, 1, 2, 4, 3)
    assert torch.equal(got.reshape(2, 1, 8, 3)[:, :, :5], x)
    assert bool((got.reshape(2, 1, 8, 3)[:, :, 5:] == 0).all())
    y = torch.randn(1, 2, 8, 3)
    assert torch.equal(tiles._blocks(y, 2, 4), y.reshape(1, 2, 2, 4, 3))


@pytest.mark.parametrize("with_buf", [False, True])
def test_take_gathers_blocks_in_order(with_buf):
    xb = torch.arange(2 * 1 * 4 * 2 * 3, dtype=torch.float64).reshape(2, 1, 4, 2, 3)
    buf = torch.full((200,), -1.0, dtype=torch.float64) if with_buf else None
    got = tiles._take(xb, torch.tensor([3, 1]), buf)
    assert torch.equal(got, xb[:, :, [3, 1]])
    got = tiles._take(xb, torch.tensor([[2, 0, 3], [1, 1, 0]]), buf)
    assert got.shape == (2, 1, 2, 6, 3)
    want = torch.stack([torch.cat([xb[:, :, i] for i in row], 2) for row in ([2, 0, 3], [1, 1, 0])], 2)
    assert torch.equal(got, want)


def test_key_real_shapes_pads_and_names_a_bad_mask():
    real = torch.tensor([[True, False, True, True, False], [True, True, True, True, True]])
    got = tiles._key_real(real, 2, 5, 2, 4, "cpu")
    assert got.dtype == torch.bool and got.shape == (2, 2, 4)
    assert got.reshape(2, 8).tolist() == [[True, False, True, True, False, False, False, False],
                                          [True, True, True, True, True, False, False, False]]
    assert torch.equal(tiles._key_real(real[:, None, None], 2, 5, 2, 4, "cpu"), got)  # (b, 1, 1, k)
    assert torch.equal(tiles._key_real(real[:1], 2, 5, 2, 4, "cpu"), got[:1])  # broadcast over the batch
    assert torch.equal(tiles._key_real(real[:, :4], 2, 4, 1, 4, "cpu"), real[:, None, :4])  # n fills the block
    assert tiles._key_real(None, 2, 5, 2, 4, "cpu") is None
    msg = "mask must be bool (b, k) or (b, 1, 1, k) with b=2, k=5 (True = may attend); got "
    for bad, tail in [
        (real.float(), "(2, 5) torch.float32"),
        (real[:, :4], "(2, 4) torch.bool"),
        (torch.ones(3, 5, dtype=torch.bool), "(3, 5) torch.bool"),
        (real[:, None], "(2, 1, 5) torch.bool"),
        (real[:, None, None].expand(2, 2, 1, 5), "(2, 2, 1, 5) torch.bool"),
        (real[:, None, None].expand(2, 1, 2, 5), "(2, 1, 2, 5) torch.bool"),
        (real[None], "(1, 2, 5) torch.bool"),
    ]:
        with pytest.raises(ValueError, match=re.escape(msg + tail) + "$"):
            tiles._key_real(bad, 2, 5, 2, 4, "cpu")


def test_workspaces_hold_the_widest_group():
    pattern = Table(table(13, seed=3, block=4))
    pl = tiles.plan(pattern, 13, 4, 6)
    like = torch.zeros(2, 3, 13, 5, dtype=torch.float64)
    ws = tiles._workspaces(pl, like, (5, 2))
    blocks = max(g.k_blocks.numel() for g in pl.groups)
    assert [w.shape for w in ws] == [(2 * 3 * blocks * 4 * 5,), (2 * 3 * blocks * 4 * 2,)]
    assert all(w.dtype == torch.float64 for w in ws)


def test_additive_mask_of_allow():
    allow = torch.tensor([[[True, False]]])
    got = tiles._additive(allow)
    assert got.dtype == torch.float32 and got.shape == (1, 1, 1, 2)
    assert got.flatten().tolist() == [0.0, float("-inf")]
    got = tiles._additive(allow[None].expand(2, 1, 1, 2), torch.float64)
    assert got.dtype == torch.float64 and got.shape == (2, 1, 1, 2)
    assert tiles._additive(None) is None


@pytest.mark.parametrize("fused", [True, False])
def test_a_pattern_with_no_key_anywhere_gives_zeros(fused):
    pattern = Table(np.zeros((6, 6), dtype=bool))
    pl = tiles.plan(pattern, 6, 4, 1)
    assert pl.groups == () and (pl.nnz_blocks, pl.allowed) == (0, 0)
    q, k, v, dout = inputs(1, 1, 6, 3, 3, seed=9)
    if fused:
        out, lse = tiles.plan_forward(q, k, v, pl, None, SCALE)
        assert bool(torch.isneginf(lse).all())
        grads = tiles.plan_backward(torch.zeros_like(dout), q, k, v, out, torch.zeros_like(lse), pl, None, SCALE)
    else:
        out = tiles.tiles_forward(q, k, v, pl, None, SCALE, 0.5, 3)
        grads = tiles.tiles_backward(dout, q, k, v, out, pl, None, SCALE, 0.5, 3)
    assert out.shape == (1, 1, 6, 3) and bool((out == 0).all())
    for gr in grads:
        assert gr.shape == (1, 1, 6, 3) and bool((gr == 0).all())


def test_dropout_keeps_a_draw_equal_to_p():
    """keep ⇔ u ≥ p for u uniform on [0, 1): P(keep) = 1 − p exactly; a draw equal to p is kept."""
    u = float(torch.rand(3, generator=torch.Generator().manual_seed(42))[1])  # the group-0 stream of seed 42
    keep = tiles._dropout_keep((3,), u, 42, 0)
    assert keep[1].item() == pytest.approx(1 / (1 - u), rel=1e-6)


def test_fused_plan_forward_in_bfloat16_keeps_the_input_dtype():
    """The kernel's row log-sum-exp comes out float32 for bfloat16 inputs; lse is returned in q's dtype."""
    pattern, n, B, b, h, real, _ = build("ragged")
    pl = tiles.plan(pattern, n, B, b * h)
    q, k, v, _ = inputs(b, h, n, 8, 8, seed=6)
    keys = tiles._key_real(real, b, n, -(-n // B), B, "cpu")
    out, lse = tiles.plan_forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), pl, keys, SCALE)
    assert out.dtype == lse.dtype == torch.bfloat16
    want, want_lse, _ = np_forward(q.numpy(), k.numpy(), v.numpy(), dense_allow(pattern, n, real, b), SCALE)
    np.testing.assert_allclose(out.double().numpy(), want, atol=0.05)
    np.testing.assert_allclose(lse.double().numpy(), want_lse, atol=0.05)


def test_plan_with_blocks_of_one_row_under_a_tight_budget(monkeypatch):
    """B = 1, a budget of two 1 × 1 scores: the group sizes are whole numbers of rows, and the output
    (explicit path) is the dense causal softmax."""
    monkeypatch.setattr(tiles, "SCORE_BUDGET", 2)
    n = 6
    pl = tiles.plan(P.causal(), n, 1, 1)
    assert [(g.q_blocks.tolist(), g.k_blocks.shape[1]) for g in pl.groups] == [([i], i + 1) for i in range(n)]
    q, k, v, _ = inputs(1, 1, n, 2, 2, seed=8)
    want, _, _ = np_forward(q.numpy(), k.numpy(), v.numpy(), np.tril(np.ones((n, n), dtype=bool)), SCALE)
    np.testing.assert_allclose(tiles.tiles_forward(q, k, v, pl, None, SCALE, 0.0, 0).numpy(), want, atol=1e-12)


def test_explicit_path_keeps_a_row_with_no_key_zero_beside_an_infinite_value():
    """Row 1 may attend nothing; its block gathers key 0, whose value is infinite: 0 · ∞ must not reach it."""
    n = 4
    t = np.eye(n, dtype=bool)
    t[1] = False
    pl = tiles.plan(Table(t), n, 2, 1)
    q, k, v, _ = inputs(1, 1, n, 2, 2, seed=10)
    v[0, 0, 0, 0] = float("inf")
    out = tiles.tiles_forward(q, k, v, pl, None, SCALE, 0.0, 0)
    assert out[0, 0, 1].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(out[0, 0, 2:].numpy(), v[0, 0, 2:].numpy())  # rows 2, 3: their own value
