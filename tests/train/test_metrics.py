"""BLEU, chrF and exact match against values computed by hand here (Papineni et al. 2002; Popović 2015)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from attnlab.train import metrics

pytest.importorskip("sacrebleu")

HYP, REF = "the cat sat on the mat", "the cat sat on the red mat"


def test_bleu_by_hand():
    # clipped n-gram matches / hypothesis n-grams: 6/6, 4/5, 3/4, 2/3; brevity penalty exp(1 − 7/6)
    want = 100 * math.exp(1 - 7 / 6) * (1 * 0.8 * 0.75 * (2 / 3)) ** 0.25
    assert metrics.scores([HYP], [REF])["bleu"] == pytest.approx(want, abs=1e-9)  # 67.32…


def _chrf(hyp: str, ref: str, order: int = 6, beta: float = 2.0) -> float:
    """chrF: character n-grams (spaces removed), precision and recall averaged over n = 1..6, then F_β."""
    h, r = hyp.replace(" ", ""), ref.replace(" ", "")
    precs, recs = [], []
    for n in range(1, order + 1):
        hn = Counter(h[i : i + n] for i in range(len(h) - n + 1))
        rn = Counter(r[i : i + n] for i in range(len(r) - n + 1))
        match = sum((hn & rn).values())
        precs.append(match / sum(hn.values()))
        recs.append(match / sum(rn.values()))
    P, R = sum(precs) / order, sum(recs) / order
    return 100 * (1 + beta**2) * P * R / (beta**2 * P + R)


def test_chrf_by_hand():
    got = metrics.scores([HYP], [REF])["chrf"]
    assert got == pytest.approx(_chrf(HYP, REF), abs=1e-6)
    assert 60 < got < 95  # and it is not the BLEU figure
    assert got != pytest.approx(metrics.scores([HYP], [REF])["bleu"], abs=1)


def test_exact_match_and_identity():
    s = metrics.scores([HYP, REF], [REF, REF])
    assert s["exact"] == 50.0 and s["n"] == 2
    same = metrics.scores([REF], [REF])
    assert same["bleu"] == pytest.approx(100.0) and same["chrf"] == pytest.approx(100.0)


def test_by_length_scores_each_bucket_on_its_own_sentences():
    hyps, refs, lengths = [REF, HYP], [REF, REF], [3, 9]
    rows = metrics.by_length(hyps, refs, lengths, [(1, 5), (6, 10)])
    assert [(r["lo"], r["hi"], r["n"]) for r in rows] == [(1, 5, 1), (6, 10, 1)]
    assert rows[0]["bleu"] == pytest.approx(100.0) and rows[0]["exact"] == 100.0
    assert rows[1]["bleu"] == pytest.approx(100 * math.exp(1 - 7 / 6) * 0.4**0.25, abs=1e-9)
    assert rows[1]["chrf"] == pytest.approx(_chrf(HYP, REF), abs=1e-6) and rows[1]["exact"] == 0.0


def test_length_buckets_by_hand():
    assert metrics.length_buckets([1, 2, 3, 4, 5, 6], 3) == [(1, 2), (3, 4), (5, 6)]
    assert metrics.length_buckets([], 3) == []
