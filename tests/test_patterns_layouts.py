"""Patterns, second part: block layouts tile by tile, names, argument checks and specs.

Every expected tile set comes from the dense mask of a double loop over the papers' definitions
(``loop_mask`` below) cut into tiles by NumPy; every expected name and message is written by hand.
"""

import numpy as np
import pytest
import torch

from attnlab import patterns as P


def loop_mask(n, rule):
    """The dense (n, n) mask of a Python rule (i, j) -> bool, by a double loop."""
    return np.array([[bool(rule(i, j)) for j in range(n)] for i in range(n)], dtype=bool).reshape(n, n)


def tiles_of(mask, block):
    """(nb, nb) bool: the tiles of ``mask`` (padded with False to whole blocks) that hold a True."""
    n = mask.shape[0]
    nb = -(-n // block)
    pad = np.zeros((nb * block, nb * block), dtype=bool)
    pad[:n, :n] = mask
    return torch.from_numpy(pad.reshape(nb, block, nb, block).any(3).any(1))


def doc_rule(lengths, causal=False):
    """Packed documents by hand: position i belongs to the document whose [start, end) holds it."""
    starts = np.cumsum([0, *lengths])

    def doc(i):
        for d in range(len(lengths)):
            if starts[d] <= i < starts[d + 1]:
                return d
        return -1

    return lambda i, j: doc(i) >= 0 and doc(i) == doc(j) and (not causal or j <= i)


GRID = [(1, 1), (1, 4), (5, 8), (8, 8), (13, 4), (20, 7), (37, 8)]

# Patterns whose block layout has an exact closed form (or falls back to the exact generic one):
# the layout must be exactly the set of non-empty tiles.
EXACT = {
    "full": (P.full(), lambda i, j: True),
    "causal": (P.causal(), lambda i, j: j <= i),
    "window(3,1)": (P.sliding_window(3, 1), lambda i, j: i - 3 <= j <= i + 1),
    "window(0,0)": (P.sliding_window(0, 0), lambda i, j: i == j),
    "window(0,9)": (P.sliding_window(0, 9), lambda i, j: i <= j <= i + 9),
    "window(11,0)": (P.sliding_window(11, 0), lambda i, j: i - 11 <= j <= i),
    "strided(4)": (P.strided(4), lambda i, j: abs(i - j) < 4 or (i - j) % 4 == 0),
    "fixed(5,2)": (P.fixed(5, 2), lambda i, j: i // 5 == j // 5 or j % 5 in (3, 4)),
    "global[0,6,40]": (P.global_tokens([6, 0, 40, 6]), lambda i, j: i in (0, 6, 40) or j in (0, 6, 40)),
    "global[7]": (P.global_tokens([7]), lambda i, j: 7 in (i, j)),
    "docs[3,0,6,2]": (P.documents([3, 0, 6, 2]), doc_rule([3, 0, 6, 2])),
    "docs[3,0,6,2] causal": (P.documents([3, 0, 6, 2], causal=True), doc_rule([3, 0, 6, 2], True)),
    "docs[4,30]": (P.documents([4, 30]), doc_rule([4, 30])),
    "docs[2,2,2,2,2,2,2,2,2,2,2]": (P.documents([2] * 11), doc_rule([2] * 11)),
    "docs[5,3,9,1,2,7,4,6] causal": (P.documents([5, 3, 9, 1, 2, 7, 4, 6], True), doc_rule([5, 3, 9, 1, 2, 7, 4, 6], True)),
}


@pytest.mark.parametrize("name", sorted(EXACT))
@pytest.mark.parametrize("n,block", GRID)
def test_closed_form_block_layouts_are_exactly_the_non_empty_tiles(name, n, block):
    pattern, rule = EXACT[name]
    mask = loop_mask(n, rule)
    assert np.array_equal(pattern.materialize(n).numpy(), mask)
    want = tiles_of(mask, block)
    assert torch.equal(pattern.block_layout(n, block), want)
    assert {tuple(t) for t in pattern.blocks(n, block).tolist()} == {tuple(t) for t in want.nonzero().tolist()}
    assert pattern.density(n, block) == pytest.approx(mask.sum() / n**2, abs=1e-12)


def dilated_rule(size, dilation):
    return lambda i, j: any(j == i + m * dilation for m in range(-size, size + 1))


# Patterns whose layout is a documented superset (a band for the dilated window, whole rows of
# the grid for the 2-D neighbourhood): it must cover every non-empty tile, and the exact tile list
# comes from ``blocks``.
SUPERSET = {
    "dilated(2,3)": (P.dilated_window(2, 3), dilated_rule(2, 3)),
    "dilated(0,4)": (P.dilated_window(0, 4), lambda i, j: i == j),
    "dilated(3,1)": (P.dilated_window(3, 1), lambda i, j: abs(i - j) <= 3),
}


@pytest.mark.parametrize("name", sorted(SUPERSET))
@pytest.mark.parametrize("n,block", GRID)
def test_band_layout_of_the_dilated_window_covers_its_tiles(name, n, block):
    pattern, rule = SUPERSET[name]
    mask = loop_mask(n, rule)
    assert np.array_equal(pattern.materialize(n).numpy(), mask)
    want = tiles_of(mask, block)
    lay = pattern.block_layout(n, block)
    assert bool((lay | ~want).all())
    # the band of i − size·dilation … i + size·dilation, by hand
    band = tiles_of(loop_mask(n, lambda i, j: abs(i - j) <= pattern.size * pattern.dilation), block)
    assert torch.equal(lay, band)
    assert {tuple(t) for t in pattern.blocks(n, block).tolist()} == {tuple(t) for t in want.nonzero().tolist()}


@pytest.mark.parametrize("H,W,kernel,dilation", [(5, 7, 3, 1), (6, 6, 5, 1), (9, 4, 3, 2), (3, 11, 1, 1)])
@pytest.mark.parametrize("block", [1, 4, 8, 64])
def test_neighborhood_layout_covers_and_blocks_are_exact(H, W, kernel, dilation, block):
    p = P.neighborhood_2d(H, W, kernel, dilation)
    n = H * W
    mask = p.materialize(n).numpy()
    want = tiles_of(mask, block)
    lay = p.block_layout(n, block)
    assert bool((lay | ~want).all())
    # every query row r reaches rows r ± kernel·dilation at most: the layout stays inside that band
    reach = kernel * dilation
    rows = tiles_of(loop_mask(n, lambda i, j: abs(i // W - j // W) <= reach), block)
    assert not bool((lay & ~rows).any())
    assert {tuple(t) for t in p.blocks(n, block).tolist()} == {tuple(t) for t in want.nonzero().tolist()}


def test_the_generic_layout_and_tile_scans_work_in_chunks(monkeypatch):
    # A tiny chunk forces several passes of the row loop in block_layout and of the tile
    # loops in blocks and density; the answers must not change.
    pattern = P.strided(3) | P.global_tokens([5])
    n, block = 29, 4
    mask = loop_mask(n, lambda i, j: abs(i - j) < 3 or (i - j) % 3 == 0 or 5 in (i, j))
    want = tiles_of(mask, block)
    for chunk in (1, 16, 40, 100, 1 << 23):
        monkeypatch.setattr(P, "_EVAL_CHUNK", chunk)
        assert torch.equal(P.Pattern.block_layout(pattern, n, block), want), chunk
        assert {tuple(t) for t in pattern.blocks(n, block).tolist()} == {tuple(t) for t in want.nonzero().tolist()}
        assert pattern.density(n, block) == pytest.approx(mask.sum() / n**2, abs=1e-12)


def test_tiles_never_allow_positions_at_or_beyond_n():
    full = P.full()
    t = full.tiles(torch.tensor([0, 1]), torch.tensor([[0, 1], [1, 0]]), 6, 4)  # (R=2, B=4, m·B=8)
    assert t.shape == (2, 4, 8)
    q = torch.tensor([0, 1])[:, None, None] * 4 + torch.arange(4)[None, :, None]
    kv = (torch.tensor([[0, 1], [1, 0]])[:, :, None] * 4 + torch.arange(4)).flatten(1)[:, None, :]
    assert torch.equal(t, (q < 6) & (kv < 6))


def test_a_given_layout_at_another_block_size_is_cut_exactly():
    layout = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    p = P.block_sparse(layout, 4)
    assert p.block_layout(12, 4) is not p.layout  # a copy: callers may write into it
    assert torch.equal(p.block_layout(12, 4), layout)
    rule = lambda i, j: bool(layout[i // 4, j // 4])  # noqa: E731
    for block in (1, 3, 5, 8):
        assert torch.equal(p.block_layout(12, block), tiles_of(loop_mask(12, rule), block))
    assert np.array_equal(p.materialize(10).numpy(), loop_mask(10, rule))  # the last block only partly used


def test_random_blocks_keep_min_of_per_row_and_blocks_and_repeat_per_n():
    assert int(P.random_blocks(0, 4).block_layout(12, 4).sum()) == 0
    everything = P.random_blocks(9, 4, seed=2).block_layout(12, 4)  # 3 blocks a row: all of them
    assert everything.all()
    p = P.random_blocks(2, 4, seed=7)
    a, b = p.block_layout(40, 4), p.block_layout(40, 4)
    assert torch.equal(a, b) and (a.sum(1) == 2).all()
    # the layout is drawn from torch.Generator().manual_seed(seed), as documented: the first
    # per_row of a random permutation of each row
    g = torch.Generator().manual_seed(7)
    pick = torch.rand(10, 10, generator=g).argsort(-1)[:, :2]
    want = torch.zeros(10, 10, dtype=torch.bool).scatter_(1, pick, True)
    assert torch.equal(a, want)
    assert p.block_layout(12, 4).shape == (3, 3)
    # 4 keys → blocks 0 and 1, nothing beyond
    assert not P.random_blocks(1, 4, seed=0).materialize(5)[:, 8:].any()


def test_global_tokens_beyond_n_are_left_out_of_the_layout():
    p = P.global_tokens([2, 5])
    for n, block in ((5, 5), (5, 1), (4, 2)):
        rule = lambda i, j: 2 in (i, j)  # noqa: E731  (5 is never < n here)
        assert torch.equal(p.block_layout(n, block), tiles_of(loop_mask(n, rule), block))
    assert torch.equal(P.global_tokens(torch.tensor([[3], [1]])).indices, torch.tensor([1, 3]))
    assert P.global_tokens([]).materialize(3).sum() == 0


def test_documents_beyond_n_and_the_total_attend_nothing():
    p = P.documents([2, 3])
    for n in (3, 5, 9):
        assert np.array_equal(p.materialize(n).numpy(), loop_mask(n, doc_rule([2, 3])))
    assert torch.equal(p.doc_of(torch.tensor([-1, 0, 1, 2, 4, 5, 6])), torch.tensor([-1, 0, 0, 1, 1, -1, -1]))
    assert torch.equal(p.cu_seqlens, torch.tensor([0, 2, 5])) and p.total == 5


REPRS = [
    (P.full(), "full()"),
    (P.causal(), "causal()"),
    (P.sliding_window(3), "sliding_window(3, 3)"),
    (P.sliding_window(2, 0), "sliding_window(2, 0)"),
    (P.dilated_window(2, 3), "dilated_window(2, 3)"),
    (P.strided(4), "strided(4)"),
    (P.fixed(5), "fixed(5, summary=1)"),
    (P.fixed(5, 2), "fixed(5, summary=2)"),
    (P.global_tokens([6, 0]), "global_tokens([0, 6])"),
    (P.random_blocks(2, 8, seed=3), "random_blocks(2, 8, seed=3)"),
    (P.random_blocks(1), "random_blocks(1, 64, seed=0)"),
    (P.block_sparse(torch.ones(3, 3, dtype=torch.bool), 12), "block_sparse(<3x3 layout>, 12)"),
    (P.documents([3, 0, 2]), "documents([3, 0, 2])"),
    (P.documents([4], causal=True), "documents([4], causal=True)"),
    (P.neighborhood_2d(4, 5, 3), "neighborhood_2d(4, 5, kernel=3, dilation=1)"),
    (P.neighborhood_2d(6, 6, 3, 2), "neighborhood_2d(6, 6, kernel=3, dilation=2)"),
    (P.sliding_window(1) | P.causal(), "(sliding_window(1, 1) | causal())"),
    (P.strided(2) & (P.full() | P.causal()), "(strided(2) & (full() | causal()))"),
]


@pytest.mark.parametrize("pattern,want", REPRS, ids=[w for _, w in REPRS])
def test_every_pattern_is_named_by_the_call_that_builds_it(pattern, want):
    assert repr(pattern) == want
    if "<" not in want:  # the name is the call: evaluating it builds the same pattern
        again = eval(want, {k: getattr(P, k) for k in P.__all__})  # noqa: S307
        assert torch.equal(again.materialize(13), pattern.materialize(13))


BAD = [
    (lambda: P.sliding_window(-1), "before must be an integer >= 0; got -1"),
    (lambda: P.sliding_window(1, -2), "after must be an integer >= 0; got -2"),
    (lambda: P.sliding_window(True), "before must be an integer >= 0; got True"),
    (lambda: P.sliding_window(1.0), "before must be an integer >= 0; got 1.0"),
    (lambda: P.dilated_window(-1, 2), "size must be an integer >= 0; got -1"),
    (lambda: P.dilated_window(1, 0), "dilation must be an integer >= 1; got 0"),
    (lambda: P.strided(0), "stride must be an integer >= 1; got 0"),
    (lambda: P.fixed(0), "block must be an integer >= 1; got 0"),
    (lambda: P.fixed(3, 0), "summary must be an integer >= 1; got 0"),
    (lambda: P.fixed(3, 4), "summary must be <= block; got summary=4, block=3"),
    (lambda: P.global_tokens([2, -1]), "global token indices must be >= 0; got [2, -1]"),
    (lambda: P.random_blocks(-1), "per_row must be an integer >= 0; got -1"),
    (lambda: P.random_blocks(1, 0), "block must be an integer >= 1; got 0"),
    (lambda: P.block_sparse(torch.ones(3, dtype=torch.bool), 4), "layout"),
    (lambda: P.block_sparse(torch.ones(2, 3, dtype=torch.bool), 4), "layout must be a square bool tensor (nb, nb); got (2, 3) torch.bool"),
    (lambda: P.block_sparse(torch.ones(2, 2), 4), "layout must be a square bool tensor (nb, nb); got (2, 2) torch.float32"),
    (lambda: P.block_sparse(torch.ones(2, 2, dtype=torch.bool), 0), "block must be an integer >= 1; got 0"),
    (lambda: P.documents([]), "documents needs a non-empty list of lengths >= 0; got []"),
    (lambda: P.documents([2, -1]), "documents needs a non-empty list of lengths >= 0; got [2, -1]"),
    (lambda: P.neighborhood_2d(-1, 3, 3), "height must be an integer >= 0; got -1"),
    (lambda: P.neighborhood_2d(3, -1, 3), "width must be an integer >= 0; got -1"),
    (lambda: P.neighborhood_2d(3, 3, 0), "kernel must be an integer >= 1; got 0"),
    (lambda: P.neighborhood_2d(3, 3, 4), "kernel must be odd (a window centred on the query); got 4"),
    (lambda: P.neighborhood_2d(3, 3, 3, 0), "dilation must be an integer >= 1; got 0"),
    (lambda: P.full().materialize(-1), "n must be an integer >= 0; got -1"),
    (lambda: P.full().blocks(0), "n must be an integer >= 1; got 0"),
    (lambda: P.full().blocks(4, 0), "block must be an integer >= 1; got 0"),
    (lambda: P.full().density(0), "n must be an integer >= 1; got 0"),
    (lambda: P.full() | "causal", "patterns combine with patterns (& and |); got str"),
    (lambda: P.full() & None, "patterns combine with patterns (& and |); got NoneType"),
    (lambda: P.from_spec([]), "a pattern spec needs at least one item and combine 'or' or 'and'; got 0 items, 'or'"),
    (lambda: P.from_spec([{"kind": "full"}], "xor"), "a pattern spec needs at least one item and combine 'or' or 'and'; got 1 items, 'xor'"),
    (lambda: P.from_spec([{"kind": "nope"}]), "pattern kind must be one of full, causal, sliding_window, dilated_window, strided, fixed, global_tokens, random_blocks; got 'nope'"),
    (lambda: P.from_spec(["full"]), "pattern kind must be one of .*; got None"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_arguments_name_what_was_given_and_expected(call, message):
    regex = message if ".*" in message else __import__("re").escape(message)
    with pytest.raises(ValueError, match=f"^{regex}" if message != "layout" else "layout"):
        call()


def test_the_smallest_allowed_arguments_build():
    assert P.sliding_window(0).materialize(3).equal(torch.eye(3, dtype=torch.bool))
    assert P.dilated_window(0, 1).materialize(3).equal(torch.eye(3, dtype=torch.bool))
    assert P.fixed(1).materialize(3).all()  # every position is its block's summary
    assert P.fixed(3, 3).materialize(4).all()
    assert P.strided(1).materialize(3).all()
    assert P.neighborhood_2d(0, 0, 1).materialize(0).shape == (0, 0)
    assert P.neighborhood_2d(2, 2, 1).materialize(4).equal(torch.eye(4, dtype=torch.bool))
    assert P.full().materialize(0).shape == (0, 0)
    assert P.documents([0]).materialize(2).sum() == 0


def test_from_spec_joins_with_or_or_and_and_converts_numbers():
    spec = [{"kind": "sliding_window", "args": ["2", 1.0]}, {"kind": "global_tokens", "args": [[0, "4"]]}]
    either = P.from_spec(spec)
    both = P.from_spec(spec, combine="and")
    a = loop_mask(9, lambda i, j: i - 2 <= j <= i + 1)
    g = loop_mask(9, lambda i, j: i in (0, 4) or j in (0, 4))
    assert np.array_equal(either.materialize(9).numpy(), a | g)
    assert np.array_equal(both.materialize(9).numpy(), a & g)
    assert repr(P.from_spec([{"kind": "causal"}])) == "causal()"  # one item: the pattern itself
    three = P.from_spec([{"kind": "causal"}, {"kind": "full"}, {"kind": "strided", "args": [3]}], "and")
    assert np.array_equal(three.materialize(7).numpy(), loop_mask(7, lambda i, j: j <= i and (abs(i - j) < 3 or (i - j) % 3 == 0)))
