"""Alignment links from attention and from IBM Model 1, against values worked out by hand here.

* ``from_weights`` on hand-made (T, S) weights: argmax per target word (ties go to the first
  source word), thresholds (a weight equal to the threshold is a link), rows with no link;
* ``attention_links`` on a stand-in model whose weights are known by construction: each
  target word attends one chosen source word, and the padded source columns and the final
  ``<eos>`` step carry the largest weights, which must never become links;
* IBM Model 1 (``experiments.ibm1``): a brute-force EM over dense NumPy tables written here,
  and a corpus where a target word that no source word explains goes to NULL (no link).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.experiments import ibm1
from attnlab.experiments.alignment import attention_links, from_weights

# -- links from one verse's weights ------------------------------------------------------------------


def test_argmax_links_each_target_word_to_its_most_attended_source_word():
    w = torch.tensor([[0.1, 0.2, 0.6, 0.1],   # target 0 → source 2
                      [0.5, 0.3, 0.1, 0.1],   # target 1 → source 0
                      [0.0, 0.0, 0.1, 0.9]])  # target 2 → source 3
    assert from_weights(w, None) == {(2, 0), (0, 1), (3, 2)}


def test_argmax_tie_goes_to_the_first_source_word_and_every_target_word_gets_one_link():
    w = torch.tensor([[0.4, 0.4, 0.2], [0.25, 0.25, 0.25], [0.1, 0.45, 0.45]])
    assert from_weights(w, None) == {(0, 0), (0, 1), (1, 2)}


def test_threshold_links_every_weight_at_or_above_it():
    w = torch.tensor([[0.3, 0.3, 0.4],    # all three at or above 0.3 (0.3 itself is a link)
                      [0.29, 0.7, 0.01],  # 0.29 is below: only source 1
                      [0.25, 0.25, 0.5],  # one link
                      [0.2, 0.2, 0.2]])   # no weight reaches 0.3 (not a softmax row): no link at all
    assert from_weights(w, 0.3) == {(0, 0), (1, 0), (2, 0), (1, 1), (2, 2)}
    assert from_weights(w, 0.5) == {(1, 1), (2, 2)}
    assert from_weights(w, 0.71) == set()


class _KnownAttention(torch.nn.Module):
    """Teacher-forced weights (b, T+1, S_max) set by construction: target step t of example k puts
    0.55 on source word ``links[k][t]``, 0.45 spread over its other real source words, and the padded
    columns get 0.9 (a model that ignored the mask); the final step (predicting <eos>) puts 1.0 on
    the last padded column, or on source 0 when there is none."""

    def __init__(self, links):
        super().__init__()
        self.links = links
        self.calls = 0

    def forward(self, src, src_mask, tgt_in, need_weights=False):
        b, s_max = src.shape
        w = torch.zeros(b, tgt_in.shape[1], s_max)
        for k in range(b):
            i = self.calls + k
            n_src = int(src_mask[k].sum())
            for t, s in enumerate(self.links[i]):
                w[k, t, :n_src] = 0.45 / max(1, n_src - 1)
                w[k, t, s] = 0.55
                w[k, t, n_src:] = 0.9
            w[k, len(self.links[i]), s_max - 1 if n_src < s_max else 0] = 1.0
        self.calls += b
        return torch.zeros(b, tgt_in.shape[1], 5), w


def test_attention_links_read_target_words_over_real_source_words_only():
    # (source ids, target ids) of different lengths, so batches carry padding on both sides
    examples = [([5, 6, 7], [5, 6]), ([5, 6, 7, 8, 9], [5, 6, 7, 8]), ([5], [5, 6, 7]), ([5, 6], [5])]
    links = [[2, 0], [4, 1, 1, 3], [0, 0, 0], [1]]
    model = _KnownAttention(links)
    arg, thr = attention_links(model, examples, batch_size=3, threshold=0.5)
    want = [{(s, t) for t, s in enumerate(row)} for row in links]
    assert arg == want
    assert thr == want  # 0.55 is the only real weight ≥ 0.5 (0.45 / (S − 1) < 0.5)
    assert model.calls == len(examples)


# -- IBM Model 1 ------------------------------------------------------------------------------------


def _brute_force_em(pairs, iterations):
    """IBM Model 1 EM over dense tables: t[e, f] with f = 0 the NULL word, started uniform."""
    tv = sorted({e for _, tgt in pairs for e in tgt})
    sv = [ibm1.NULL] + sorted({f for src, _ in pairs for f in src})
    t = np.ones((len(tv), len(sv)))
    for _ in range(iterations):
        count = np.zeros_like(t)
        for src, tgt in pairs:
            cols = [0] + [sv.index(f) for f in src]
            for e in tgt:
                r = tv.index(e)
                post = t[r, cols] / t[r, cols].sum()  # p(source word i | target word e)
                for c, p in zip(cols, post):
                    count[r, c] += p
        seen = count.sum(0) > 0
        t = np.where(seen, count / np.where(seen, count.sum(0), 1.0), 0.0)
    return {(e, f): t[i, j] for i, e in enumerate(tv) for j, f in enumerate(sv) if t[i, j] > 0}


def _brute_force_align(src, tgt, table):
    links = set()
    for j, e in enumerate(tgt):
        scores = [table.get((e, ibm1.NULL), 0.0)] + [table.get((e, f), 0.0) for f in src]
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))  # the first of the best, NULL first
        if best > 0:
            links.add((best - 1, j))
    return links


@pytest.mark.parametrize("iterations", [1, 2, 5])
def test_ibm1_matches_a_brute_force_em(iterations):
    pairs = [(["a", "b", "c"], ["x", "y"]), (["a", "c"], ["x", "z", "z"]), (["b"], ["y", "w"]),
             (["c", "a", "a"], ["z", "x", "x", "w"]), (["d", "b"], ["v", "y"])]
    got, want = ibm1.train(pairs, iterations), _brute_force_em(pairs, iterations)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key
    for src, tgt in pairs:
        assert ibm1.align(src, tgt, got) == _brute_force_align(src, tgt, want)


def test_ibm1_a_target_word_no_source_word_explains_goes_to_null():
    # "do" appears in every verse, each time beside a different source word: only NULL is always there.
    pairs = [(["a"], ["x", "do"]), (["b"], ["y", "do"]), (["c"], ["z", "do"])]
    # Round 1 from uniform, by hand: each target word shares 1/2 between NULL and its source word;
    # c(do, NULL) = 3/2 of total(NULL) = 3 → t(do | NULL) = 1/2; t(do | a) = t(x | a) = 1/2; t(x | NULL) = 1/6.
    t1 = ibm1.train(pairs, 1)
    assert t1[("do", ibm1.NULL)] == pytest.approx(0.5) and t1[("do", "a")] == pytest.approx(0.5)
    assert t1[("x", ibm1.NULL)] == pytest.approx(1 / 6) and t1[("x", "a")] == pytest.approx(0.5)
    # a tie between NULL and a source word goes to NULL: no link for "do"
    assert ibm1.align(["a"], ["x", "do"], t1) == {(0, 0)}
    # Round 2: x splits 1/6 : 1/2 → c(x, NULL) = 1/4, c(x, a) = 3/4; do splits 1/2 : 1/2.
    # total(NULL) = 3 · (1/4 + 1/2) = 9/4, total(a) = 3/4 + 1/2 = 5/4
    # → t(do | NULL) = (3/2) / (9/4) = 2/3 > t(do | a) = (1/2) / (5/4) = 2/5; t(x | a) = 3/5, t(x | NULL) = 1/9.
    t2 = ibm1.train(pairs, 2)
    assert t2[("do", ibm1.NULL)] == pytest.approx(2 / 3) and t2[("do", "a")] == pytest.approx(2 / 5)
    assert t2[("x", "a")] == pytest.approx(3 / 5) and t2[("x", ibm1.NULL)] == pytest.approx(1 / 9)
    for i, (src, tgt) in enumerate(pairs):
        assert ibm1.align(src, tgt, t2) == {(0, 0)}, i  # the content word linked, "do" to NULL
    # and a target word never seen in training has no table entry at all: no link either
    assert ibm1.align(["a"], ["x", "unseen"], t2) == {(0, 0)}
