"""Patterns: each index function against a loop written from the papers' definitions."""

import numpy as np
import pytest
import torch

from attnlab import kernels as K
from attnlab import patterns as P


def loop_mask(n, rule):
    """The dense mask from a Python rule (i, j) -> bool, by a double loop."""
    return torch.tensor([[bool(rule(i, j)) for j in range(n)] for i in range(n)])


RULES = {
    "full": (P.full(), lambda i, j: True),
    "causal": (P.causal(), lambda i, j: j <= i),
    "window(3,1)": (P.sliding_window(3, 1), lambda i, j: i - 3 <= j <= i + 1),
    "window(0,0)": (P.sliding_window(0, 0), lambda i, j: i == j),
    "dilated(2,3)": (P.dilated_window(2, 3), lambda i, j: any(j == i + m * 3 for m in range(-2, 3))),
    "strided(4)": (P.strided(4), lambda i, j: abs(i - j) < 4 or (i - j) % 4 == 0),
    "fixed(5,2)": (P.fixed(5, 2), lambda i, j: i // 5 == j // 5 or j % 5 in (3, 4)),
    "global[0,6]": (P.global_tokens([0, 6]), lambda i, j: i in (0, 6) or j in (0, 6)),
}


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("n", [1, 7, 20])
def test_materialize_matches_definition(name, n):
    pattern, rule = RULES[name]
    assert torch.equal(pattern.materialize(n), loop_mask(n, rule))


def test_window_is_documented_or_not_and():
    # i − before ≤ j ≤ i + after, inclusive at both ends
    want = torch.tensor(
        [
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0, 0],
            [0, 1, 1, 1, 1, 0],
            [0, 0, 1, 1, 1, 1],
            [0, 0, 0, 1, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(P.sliding_window(2, 1).materialize(6), want)
    back, fwd = P.sliding_window(2, 0), P.sliding_window(0, 2)
    # the symmetric window is back OR forward; AND would keep only the diagonal (local-attention#5)
    assert torch.equal(P.sliding_window(2, 2).materialize(9), (back | fwd).materialize(9))
    assert torch.equal((back & fwd).materialize(9), torch.eye(9, dtype=torch.bool))
    # a causal local window equals window AND causal
    assert torch.equal(back.materialize(9), (P.sliding_window(2) & P.causal()).materialize(9))


def test_global_tokens_see_and_are_seen_by_all():
    m = (P.sliding_window(1) | P.global_tokens([3])).materialize(10)
    assert m[3].all() and m[:, 3].all()
    assert m.sum() == P.sliding_window(1).materialize(10).sum() + (10 - 3) * 2  # 7 new in row, 7 in column


@pytest.mark.parametrize("op", ["and", "or"])
def test_composition_is_elementwise(op):
    a, b = P.sliding_window(2, 5), P.strided(3) | P.global_tokens([1])
    c = a & b if op == "and" else a | b
    ma, mb = a.materialize(17), b.materialize(17)
    assert torch.equal(c.materialize(17), ma & mb if op == "and" else ma | mb)


def dense_tiles(mask, block):
    """The non-empty tiles of a dense mask, by NumPy."""
    m = mask.numpy()
    n = m.shape[0]
    nb = -(-n // block)
    return {(i, j) for i in range(nb) for j in range(nb) if m[i * block : (i + 1) * block, j * block : (j + 1) * block].any()}


PATTERNS = [
    P.full(),
    P.causal(),
    P.sliding_window(4, 1),
    P.dilated_window(2, 5),
    P.strided(6),
    P.fixed(7),
    P.global_tokens([2, 30]),
    P.random_blocks(2, 8, seed=3),
    P.random_blocks(1, 5, seed=1) | P.sliding_window(3),
    P.sliding_window(9) & P.causal(),
    P.block_sparse(torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool), 12),
]


@pytest.mark.parametrize("pattern", PATTERNS, ids=repr)
@pytest.mark.parametrize("block", [4, 8])
def test_blocks_and_density(pattern, block):
    n = 33 if "block_sparse" in repr(pattern) else 37
    m = pattern.materialize(n)
    got = {tuple(t) for t in pattern.blocks(n, block).tolist()}
    assert got == dense_tiles(m, block)
    assert pattern.density(n, block) == pytest.approx(int(m.sum()) / n**2, abs=1e-12)
    assert pattern.block_layout(n, block).shape == (-(-n // block),) * 2


def test_random_blocks_per_row_and_seed():
    a = P.random_blocks(3, 4, seed=5)
    lay = a.block_layout(40, 4)
    assert (lay.sum(1) == 3).all()
    assert torch.equal(lay, P.random_blocks(3, 4, seed=5).block_layout(40, 4))
    assert not torch.equal(lay, P.random_blocks(3, 4, seed=6).block_layout(40, 4))
    # the element mask is the layout blown up to its blocks
    assert torch.equal(a.materialize(40), lay.repeat_interleave(4, 0).repeat_interleave(4, 1))


def test_block_sparse_layout_must_cover_n():
    pat = P.block_sparse(torch.ones(3, 3, dtype=torch.bool), 4)
    assert pat.materialize(12).all() and pat.materialize(9).all()
    with pytest.raises(ValueError, match="covers 9..12 positions; got n=13"):
        pat.materialize(13)


@pytest.mark.parametrize(
    "call",
    [
        lambda: P.sliding_window(-1),
        lambda: P.strided(0),
        lambda: P.fixed(3, 4),
        lambda: P.global_tokens([-1]),
        lambda: P.block_sparse(torch.ones(2, 3, dtype=torch.bool), 4),
        lambda: P.sliding_window(2) & torch.ones(3),
        lambda: K.top_k(0),
    ],
)
def test_bad_arguments_raise(call):
    with pytest.raises(ValueError):
        call()


def test_top_k_keeps_the_k_best_keys():
    torch.manual_seed(1)
    q, k = torch.randn(2, 3, 11, 4, dtype=torch.float64), torch.randn(2, 3, 11, 4, dtype=torch.float64)
    m = K.top_k(3).mask(q, k)
    assert m.shape == (2, 3, 11, 11) and (m.sum(-1) == 3).all()
    s = (q @ k.transpose(-1, -2)).numpy()
    best = np.argsort(-s, axis=-1)[..., :3]
    want = np.zeros_like(s, dtype=bool)
    np.put_along_axis(want, best, True, axis=-1)
    assert np.array_equal(m.numpy(), want)
    # within a pattern: only allowed keys are kept, and rows with fewer keep all
    mw = K.top_k(4, within=P.sliding_window(1)).mask(q, k)
    assert not (mw & ~P.sliding_window(1).materialize(11)).any()
    assert (mw.sum(-1) == P.sliding_window(1).materialize(11).sum(-1)).all()


def test_explain_sparse_example_records_masked_scores():
    from attnlab.explain import examples, mechanisms

    ex = examples.parse(
        """
        mechanism = "sparse"
        [inputs]
        query = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -1.0]]
        keys = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -1.0]]
        [params]
        pattern = [{kind = "sliding_window", args = [1, 0]}, {kind = "global_tokens", args = [[0]]}]
        """,
        "inline",
    )
    t = mechanisms.run(ex)
    w = t["weights"].value  # rows 0 (global) 4 keys, 1: 2, 2: 3, 3: 3 → 4 of 16 masked
    allowed = (P.sliding_window(1, 0) | P.global_tokens([0])).materialize(4)
    assert torch.equal(w > 0, allowed)
    assert "4 of 16 scores masked" in t["masked_scores"].note
    with pytest.raises(ValueError, match="pattern kind"):
        P.from_spec([{"kind": "nope"}])


# Patterns' defaults and edges: tile sizes, dilated bands, documents, neighbourhoods, random blocks.
#
# Every pattern is built inside its test (the mutation run imports the package before a mutant is
# switched on, so objects built at collection time never see a constructor's mutant). Expected masks
# and tile sets come from double loops over the definitions, written here.
def loop_mask_np(n, rule):
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
    want = tile_set(loop_mask_np(130, lambda i, j: j <= i), 64)  # 3 query blocks of 64
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
    assert as_set(both.blocks(10, 4)) == tile_set(loop_mask_np(10, lambda i, j: j <= i), 4)


@pytest.mark.parametrize("size,dilation,n,block", [(2, 3, 37, 4), (1, 2, 20, 2), (3, 1, 13, 4)])
def test_the_dilated_window_band_spans_size_times_dilation(size, dilation, n, block):
    p = P.dilated_window(size, dilation)
    assert p.before == p.after == size * dilation
    rule = lambda i, j: any(j == i + m * dilation for m in range(-size, size + 1))  # noqa: E731
    assert as_set(p.blocks(n, block)) == tile_set(loop_mask_np(n, rule), block)
    band = tile_set(loop_mask_np(n, lambda i, j: abs(i - j) <= size * dilation), block)
    assert as_set(p.block_layout(n, block).nonzero()) == band


def test_global_token_positions_given_as_floats_become_integer_positions():
    p = P.global_tokens(torch.tensor([5.0, 1.0]))
    assert p.indices.dtype == torch.long and p.indices.tolist() == [1, 5]
    assert repr(p) == "global_tokens([1, 5])"
    n, block = 9, 4
    assert as_set(p.blocks(n, block)) == tile_set(loop_mask_np(n, lambda i, j: i in (1, 5) or j in (1, 5)), block)


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
    want = loop_mask_np(5, lambda i, j: (i < 2) == (j < 2))
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
    want = tile_set(loop_mask_np(n, lambda i, j: doc(i) >= 0 and doc(i) == doc(j)), 4)
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
    want = loop_mask_np(20, natten_rule(4, 5, 3))
    assert np.array_equal(P.neighborhood_2d(4, 5, 3).materialize(20).numpy(), want)
    assert np.array_equal(P.Neighborhood2D(4, 5, 3).materialize(20).numpy(), want)
    assert P.Neighborhood2D(4, 5, 3).dilation == 1


def test_positions_beyond_the_grid_attend_and_are_attended_by_nothing():
    H, W, k = 3, 4, 3
    rule = natten_rule(H, W, k)
    n = H * W + 5  # padded past the grid
    want = loop_mask_np(n, lambda i, j: i < H * W and j < H * W and rule(i, j))
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
