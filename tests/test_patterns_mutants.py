"""Patterns, third part: behaviours pinned for the mutation run (issue 17).

Every pattern is built inside its test (the mutation run imports the package before a mutant is
switched on, so objects built at collection time never see a constructor's mutant). Expected masks
and tile sets come from double loops over the definitions, written here.
"""

import numpy as np
import pytest
import torch

from attnlab import patterns as P


def loop_mask(n, rule):
    return np.array([[bool(rule(i, j)) for j in range(n)] for i in range(n)], dtype=bool).reshape(n, n)


def tile_set(mask, block):
    n = mask.shape[0]
    nb = -(-n // block)
    pad = np.zeros((nb * block, nb * block), dtype=bool)
    pad[:n, :n] = mask
    return {tuple(t) for t in np.argwhere(pad.reshape(nb, block, nb, block).any(3).any(1)).tolist()}


def as_set(blocks):
    return {tuple(t) for t in blocks.tolist()}


def test_blocks_default_to_tiles_of_64():
    p = P.causal()
    want = tile_set(loop_mask(130, lambda i, j: j <= i), 64)  # 3 query blocks of 64
    assert as_set(p.blocks(130)) == want
    assert len(want) == 6


def test_every_candidate_tile_is_checked_when_one_tile_fills_a_chunk(monkeypatch):
    # one tile per pass: blocks and density must still visit every candidate exactly once
    monkeypatch.setattr(P, "_EVAL_CHUNK", 16)
    n, block = 10, 4
    full_tiles = {(i, j) for i in range(3) for j in range(3)}
    assert as_set(P.full().blocks(n, block)) == full_tiles
    assert P.full().density(n, block) == 1.0
    assert P.causal().density(n, block) == pytest.approx(55 / 100, abs=1e-12)


def test_a_full_layout_is_bool_and_combines_with_other_layouts():
    lay = P.full().block_layout(10, 4)
    assert lay.dtype == torch.bool and lay.shape == (3, 3) and bool(lay.all())
    both = P.full() & P.causal()
    assert torch.equal(both.block_layout(10, 4), torch.ones(3, 3, dtype=torch.bool).tril())
    assert as_set(both.blocks(10, 4)) == tile_set(loop_mask(10, lambda i, j: j <= i), 4)


@pytest.mark.parametrize("size,dilation,n,block", [(2, 3, 37, 4), (1, 2, 20, 2), (3, 1, 13, 4)])
def test_the_dilated_window_band_spans_size_times_dilation(size, dilation, n, block):
    p = P.dilated_window(size, dilation)
    assert p.before == p.after == size * dilation
    rule = lambda i, j: any(j == i + m * dilation for m in range(-size, size + 1))  # noqa: E731
    assert as_set(p.blocks(n, block)) == tile_set(loop_mask(n, rule), block)
    band = tile_set(loop_mask(n, lambda i, j: abs(i - j) <= size * dilation), block)
    assert as_set(p.block_layout(n, block).nonzero()) == band


def test_global_token_positions_given_as_floats_become_integer_positions():
    p = P.global_tokens(torch.tensor([5.0, 1.0]))
    assert p.indices.dtype == torch.long and p.indices.tolist() == [1, 5]
    assert repr(p) == "global_tokens([1, 5])"
    n, block = 9, 4
    assert as_set(p.blocks(n, block)) == tile_set(loop_mask(n, lambda i, j: i in (1, 5) or j in (1, 5)), block)


def test_a_block_layout_allows_nothing_outside_the_positions_it_covers():
    p = P.block_sparse(torch.ones(2, 2, dtype=torch.bool), 4)  # covers positions 0..7
    t = torch.tensor
    assert bool(p.allows(t(7), t(7), 8))
    assert not bool(p.allows(t(8), t(0), 8))
    assert not bool(p.allows(t(0), t(8), 8))
    assert not bool(p.allows(t(8), t(8), 8))


def test_block_sparse_names_the_layout_argument():
    with pytest.raises(ValueError, match=r"^layout must have at least 2 dimensions; got shape \(4\)$"):
        P.block_sparse(torch.ones(4, dtype=torch.bool), 2)


def test_documents_built_directly_are_not_causal_by_default():
    d = P.Documents([2, 3])
    assert d.causal is False
    want = loop_mask(5, lambda i, j: (i < 2) == (j < 2))
    assert np.array_equal(d.materialize(5).numpy(), want)


def test_document_lengths_given_as_an_integer_tensor_become_long_lengths():
    d = P.documents(torch.tensor([2, 3], dtype=torch.int32))
    assert d.lengths.dtype == torch.long and d.cu_seqlens.dtype == torch.long
    assert d.cu_seqlens.tolist() == [0, 2, 5] and d.total == 5
    assert repr(d) == "documents([2, 3])"


@pytest.mark.parametrize("lengths,n", [([1], 1), ([1], 3), ([1, 3], 1), ([1, 2], 5)])
def test_a_single_position_document_keeps_its_tile(lengths, n):
    p = P.documents(lengths)
    starts = np.cumsum([0, *lengths])
    doc = lambda i: next((d for d in range(len(lengths)) if starts[d] <= i < starts[d + 1]), -1)  # noqa: E731
    want = tile_set(loop_mask(n, lambda i, j: doc(i) >= 0 and doc(i) == doc(j)), 4)
    assert (0, 0) in want
    assert as_set(p.blocks(n, 4)) == want


def natten_rule(H, W, kernel):
    """NATTEN, dilation 1, every side >= kernel: the k × k window centred on the query, shifted inside."""

    def start(i, side):
        return min(max(i - kernel // 2, 0), side - kernel)

    def ok(i, j):
        qr, qc, kr, kc = i // W, i % W, j // W, j % W
        return start(qr, H) <= kr < start(qr, H) + kernel and start(qc, W) <= kc < start(qc, W) + kernel

    return ok


def test_neighborhood_dilation_defaults_to_one():
    want = loop_mask(20, natten_rule(4, 5, 3))
    assert np.array_equal(P.neighborhood_2d(4, 5, 3).materialize(20).numpy(), want)
    assert np.array_equal(P.Neighborhood2D(4, 5, 3).materialize(20).numpy(), want)
    assert P.Neighborhood2D(4, 5, 3).dilation == 1


def test_positions_beyond_the_grid_attend_and_are_attended_by_nothing():
    H, W, k = 3, 4, 3
    rule = natten_rule(H, W, k)
    n = H * W + 5  # padded past the grid
    want = loop_mask(n, lambda i, j: i < H * W and j < H * W and rule(i, j))
    got = P.neighborhood_2d(H, W, k).materialize(n).numpy()
    assert np.array_equal(got, want)
    assert not got[H * W :].any() and not got[:, H * W :].any()


def test_random_blocks_default_to_tiles_of_64_and_seed_0():
    p = P.random_blocks(1)
    assert p.block == 64 and p.seed == 0
    m = p.materialize(128)
    assert (m.sum(-1) == 64).all()  # one whole key tile of 64 per query
    assert torch.equal(P.random_blocks(1, 4).materialize(16), P.random_blocks(1, 4, seed=0).materialize(16))
    assert torch.equal(P.random_blocks(1, 4).layout_for(16), P.random_blocks(1, 4, 0).layout_for(16))
