"""Kernels: the reach of non-finite keys (``reach``) and the split of a pattern into parts (``split``).

Reference: hit[b, h, i] = ∃ j: allows(i, j) ∧ bad[b, h, j], written here as a plain Python loop
over the pattern's dense mask; the parts of a split are checked against patterns written by hand.
"""

import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import tiles
from attnlab.kernels.reach import reach


def loop_reach(bad: torch.Tensor, pattern, n: int) -> torch.Tensor:
    allow = pattern.materialize(n).tolist()
    b, h, _ = bad.shape
    hit = torch.zeros(b, h, n, dtype=torch.bool)
    for bi in range(b):
        for hi in range(h):
            row = bad[bi, hi].tolist()
            for i in range(n):
                hit[bi, hi, i] = any(allow[i][j] and row[j] for j in range(n))
    return hit


PATTERNS = {
    "window": lambda: P.sliding_window(2, 1),
    "globals": lambda: P.global_tokens([1, 6]),
    "window_and_globals": lambda: P.sliding_window(1) | P.global_tokens([0, 9]),
    "whole_blocks": lambda: P.random_blocks(1, 4, seed=2),  # block-aligned: tiles with every pair allowed
    "strided_beside_window": lambda: P.sliding_window(1) | P.strided(3),
    "dense": lambda: P.full(),
}


@pytest.mark.parametrize("n", [12, 11])
@pytest.mark.parametrize("name", list(PATTERNS))
def test_reach_equals_a_loop_over_the_dense_mask_per_head(name, n):
    """b = 2, h = 2 with a different bad key set in each (b, h): no part may mix heads or batch elements."""
    pattern = PATTERNS[name]()
    bad = torch.zeros(2, 2, n, dtype=torch.bool)
    bad[0, 0, 0] = True  # only the first key: rows whose window starts at 0
    bad[0, 1, n - 1] = True  # only the last key
    bad[1, 0, 4] = True  # one key in the middle, not global
    # bad[1, 1]: none
    hit = reach(bad, pattern, 4)
    assert hit.dtype == torch.bool and hit.shape == (2, 2, n)
    assert torch.equal(hit, loop_reach(bad, pattern, n))


def test_reach_of_a_bad_first_key_through_a_window_hits_exactly_its_rows():
    bad = torch.zeros(1, 1, 8, dtype=torch.bool)
    bad[..., 0] = True
    hit = reach(bad, P.sliding_window(2, 0), 4)  # query i sees keys i-2 .. i: key 0 is seen by rows 0, 1, 2
    assert hit[0, 0].tolist() == [True, True, True, False, False, False, False, False]


def test_reach_through_globals_stays_in_its_own_head():
    """A non-global bad key in head 0 reaches the global rows of head 0 only."""
    bad = torch.zeros(2, 2, 6, dtype=torch.bool)
    bad[0, 0, 3] = True
    hit = reach(bad, P.global_tokens([1]), 4)
    want = torch.zeros(2, 2, 6, dtype=torch.bool)
    want[0, 0, 1] = True  # the global query 1 sees key 3; no other query does (key 3 is not global)
    assert torch.equal(hit, want)


def test_reach_through_global_tokens_past_the_end_is_an_empty_hit_of_full_shape():
    """Global tokens at or past n take no part: the hit keeps its (b, h, n) shape, all False."""
    bad = torch.ones(2, 3, 5, dtype=torch.bool)
    for pattern in (P.global_tokens([5]), P.global_tokens([5, 7])):
        hit = reach(bad, pattern, 4)
        assert hit.shape == (2, 3, 5) and not bool(hit.any())


def test_reach_through_a_global_token_at_n_minus_one_and_one_at_n():
    bad = torch.zeros(1, 1, 5, dtype=torch.bool)
    bad[..., 2] = True
    hit = reach(bad, P.global_tokens([4, 5]), 4)  # only query 4 is global inside [0, 5)
    assert hit[0, 0].tolist() == [False, False, False, False, True]


@pytest.mark.parametrize("b, h", [(1, 1), (2, 3)])
def test_reach_through_a_plan_cut_into_several_groups(monkeypatch, b, h):
    """A small score budget cuts the plan of a dense pattern into groups of 2 query blocks
    (budget // (b·h · B · m · B) rows each); the hit is still the loop's."""
    monkeypatch.setattr(tiles, "SCORE_BUDGET", 128 * b * h)
    pattern = P.full()
    bad = torch.zeros(b, h, 16, dtype=torch.bool)
    bad[0, 0, 5] = True
    hit = reach(bad, pattern, 4)
    assert len(tiles.plan(pattern, 16, 4, b * h).groups) == 2
    assert torch.equal(hit, loop_reach(bad, pattern, 16))


def test_split_gives_the_window_the_merged_global_tokens_and_the_rest_without_them():
    from attnlab.kernels.parts import split

    win_ = P.sliding_window(1)
    pattern = win_ | P.strided(3) | P.global_tokens([2]) | P.causal() | P.global_tokens([5]) | P.fixed(4)
    win, glob, rest = split(pattern)
    assert win is win_
    assert glob.indices.tolist() == [2, 5]
    n = 10
    i = torch.arange(n)
    others = P.strided(3).materialize(n) | P.causal().materialize(n) | P.fixed(4).materialize(n)
    covered = (i[None, :] - i[:, None]).abs() <= 1
    covered |= torch.isin(i, torch.tensor([2, 5]))[:, None] | torch.isin(i, torch.tensor([2, 5]))[None, :]
    assert torch.equal(rest.materialize(n), others & ~covered)
    # globals beside a rest and no window: the rest is taken without the global pairs
    _, glob2, rest2 = split(P.global_tokens([0]) | P.causal())
    assert glob2.indices.tolist() == [0] and torch.equal(rest2.materialize(4), torch.tensor(
        [[False] * 4, [False, True, False, False], [False, True, True, False], [False, True, True, True]]))
    assert split(P.causal())[:2] == (None, None)
