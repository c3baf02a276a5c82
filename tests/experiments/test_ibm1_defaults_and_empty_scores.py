"""IBM Model 1's default of five EM rounds (against a dense EM written here), its alignment from a table
given by hand (a word with no NULL entry, a word with no entry at all), and corpus AER with no links."""

from __future__ import annotations

import pytest

from attnlab.experiments import ibm1
from attnlab.experiments.alignment import corpus_aer


def _em(pairs, rounds):
    t = {}  # empty: every pair starts at 1 (uniform); later every co-occurring pair has an entry
    for _ in range(rounds):
        count, total = {}, {}
        for src, tgt in pairs:
            fs = [ibm1.NULL, *src]
            for e in tgt:
                z = sum(t.get((e, f), 1.0) for f in fs)
                for f in fs:
                    c = t.get((e, f), 1.0) / z
                    count[(e, f)] = count.get((e, f), 0.0) + c
                    total[f] = total.get(f, 0.0) + c
        t = {k: c / total[k[1]] for k, c in count.items()}
    return t


def test_train_runs_five_rounds_by_default():
    pairs = [(["a", "b"], ["x", "y"]), (["a"], ["x"]), (["b", "c"], ["y", "z", "z"])]
    got, five, four = ibm1.train(pairs), _em(pairs, 5), _em(pairs, 4)
    assert got.keys() == five.keys()
    for k in five:
        assert got[k] == pytest.approx(five[k], rel=1e-12)
    assert any(abs(five[k] - four[k]) > 1e-6 for k in five)  # five rounds differ from four


def test_align_from_a_table_written_by_hand():
    table = {("x", "a"): 0.2, ("x", "b"): 0.7, ("y", ibm1.NULL): 0.4, ("y", "a"): 0.3}
    # x has no NULL entry (0): its best source word b; y stays with NULL (0.4 > 0.3); z has no entry: no link
    assert ibm1.align(["a", "b"], ["x", "y", "z"], table) == {(1, 0)}
    assert ibm1.align(["b", "a"], ["y", "x"], {("x", "a"): 0.5, ("y", "b"): 1e-9}) == {
        (0, 0),
        (1, 1),
    }


def test_corpus_aer_with_no_links_is_zero():
    assert corpus_aer([], []) == 0.0
    assert corpus_aer([set(), set()], [set(), set()]) == 0.0
    assert corpus_aer([set()], [{(0, 0)}]) == 1.0
