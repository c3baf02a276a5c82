"""BLEU, chrF, exact match and the per-length breakdown against values computed by hand.

BLEU (Papineni et al. 2002): BLEU = BP · exp(Σ_{n=1..4} ¼ log p_n), p_n the clipped n-gram
precision summed over the corpus, BP = min(1, exp(1 − r/c)) for reference length r and
hypothesis length c. chrF (Popović 2015, sacrebleu's defaults): character n-grams n = 1..6 with
whitespace removed (hypothesis n-grams of an order the reference lacks are not counted);
P and R averaged over the orders where both sides have n-grams;
chrF = (1 + β²) P R / (β² P + R), β = 2. Counts below are written out by hand.
"""

import math
import sys

import pytest

from attnlab.train import metrics

pytest.importorskip("sacrebleu")

HYP1, REF1 = "the cat sat on the mat", "the cat sat on a mat"
# unigrams 5/6 (the ×2 clipped to 1), bigrams 3/5, trigrams 2/4, 4-grams 1/3; equal lengths: BP = 1
BLEU1 = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
HYP2, REF2 = "the cat sat on", "the cat sat on the mat"
# every n-gram matches (4/4, 3/3, 2/2, 1/1); c = 4, r = 6: BP = exp(1 − 6/4)
BLEU2 = 100 * math.exp(1 - 6 / 4)
# corpus: matches and totals added over both sentences; c = 10, r = 12
BLEU12 = 100 * math.exp(1 - 12 / 10) * (9 / 10 * 6 / 8 * 4 / 6 * 2 / 4) ** 0.25


def fbeta(p, r, beta=2.0):
    return (1 + beta**2) * p * r / (beta**2 * p + r)


# "abc" vs "abcd": n=1 3/3 and 3/4, n=2 2/2 and 2/3, n=3 1/1 and 1/2, n≥4 no hypothesis n-grams
CHRF_A = 100 * fbeta(1.0, (3 / 4 + 2 / 3 + 1 / 2) / 3)
# "aab" vs "ab": n=1 P 2/3 R 2/2 (a clipped), n=2 P 1/2 R 1/1, n=3 no reference trigram
CHRF_B = 100 * fbeta((2 / 3 + 1 / 2) / 2, 1.0)
# corpus of both, counts summed first; sacrebleu counts no hypothesis n-grams of an order the
# reference lacks ("ab" has no trigram): n=1 P 5/6 R 5/6, n=2 P 3/4 R 3/4, n=3 P 1/1 R 1/2
CHRF_AB = 100 * fbeta((5 / 6 + 3 / 4 + 1) / 3, (5 / 6 + 3 / 4 + 1 / 2) / 3)


def test_hand_values_are_what_they_say():
    assert BLEU1 == pytest.approx(53.7284966, abs=1e-6)
    assert BLEU2 == pytest.approx(60.6530660, abs=1e-6)
    assert CHRF_B == pytest.approx(87.5, abs=1e-9)


@pytest.mark.parametrize(
    "hyp,ref,bleu",
    [(HYP1, REF1, BLEU1), (HYP2, REF2, BLEU2), (REF1, REF1, 100.0)],
)
def test_sentence_bleu(hyp, ref, bleu):
    s = metrics.scores([hyp], [ref])
    assert s["bleu"] == pytest.approx(bleu, abs=1e-6)
    assert s["exact"] == (100.0 if hyp == ref else 0.0)
    assert s["n"] == 1


def test_corpus_bleu_sums_counts_before_the_mean():
    s = metrics.scores([HYP1, HYP2], [REF1, REF2])
    assert s["bleu"] == pytest.approx(BLEU12, abs=1e-6)
    assert s["bleu"] != pytest.approx((BLEU1 + BLEU2) / 2, abs=0.1)  # not an average of sentences


@pytest.mark.parametrize("hyp,ref,chrf", [("abc", "abcd", CHRF_A), ("aab", "ab", CHRF_B), ("a b c", "abc", 100.0)])
def test_sentence_chrf(hyp, ref, chrf):
    assert metrics.scores([hyp], [ref])["chrf"] == pytest.approx(chrf, abs=1e-6)


def test_corpus_chrf_and_bleu_are_not_swapped():
    s = metrics.scores(["abc", "aab"], ["abcd", "ab"])
    assert s["chrf"] == pytest.approx(CHRF_AB, abs=1e-6)
    # one-word sentences: no bigram of words exists, so corpus BLEU is 0 (and chrF is not)
    assert s["bleu"] == pytest.approx(0.0, abs=1e-9)
    t = metrics.scores([HYP1], [REF1])
    assert t["bleu"] == pytest.approx(BLEU1, abs=1e-6) and t["chrf"] != pytest.approx(BLEU1, abs=1.0)


def test_exact_match():
    assert metrics.exact_match(["a", "b", "c"], ["a", "x", "c"]) == pytest.approx(200 / 3)
    assert metrics.exact_match([], []) == 0.0
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        metrics.exact_match(["a", "b"], ["a"])
    assert metrics.scores([], []) == {"exact": 0.0, "bleu": 0.0, "chrf": 0.0, "n": 0}


def test_length_buckets():
    lengths = [8, 1, 12, 2, 9, 3, 5, 10, 1, 8]  # sorted: 1 1 2 3 5 8 8 9 10 12
    edges = metrics.length_buckets(lengths, 5)
    # quintiles of the sorted list: (1,1) (2,3) (5,8) (8→9, since 8 is taken) (10,12)
    assert edges == [(1, 1), (2, 3), (5, 8), (9, 9), (10, 12)]
    assert sum(sum(lo <= n <= hi for n in lengths) for lo, hi in edges) == len(lengths)  # a partition
    assert metrics.length_buckets([], 3) == []
    assert metrics.length_buckets([4, 4, 4], 3) == [(4, 4)]


def test_by_length_scores_each_bucket_on_its_own():
    hyps = [HYP1, "abc", HYP2, "zz"]
    refs = [REF1, "abcd", REF2, "zz"]
    lengths = [6, 1, 4, 2]
    rows = metrics.by_length(hyps, refs, lengths, [(1, 2), (3, 4), (5, 9), (10, 20)])
    assert [(r["lo"], r["hi"], r["n"]) for r in rows] == [(1, 2, 2), (3, 4, 1), (5, 9, 1), (10, 20, 0)]
    assert rows[0]["exact"] == 50.0
    # bucket (1, 2) holds "abc"/"abcd" and "zz"/"zz": chrF counts summed over the two
    # n=1 5/5 5/6, n=2 3/3 3/4, n=3 1/1 1/2 (n≥4: "abc" and "zz" have none on the hypothesis side)
    assert rows[0]["chrf"] == pytest.approx(100 * fbeta(1.0, (5 / 6 + 3 / 4 + 1 / 2) / 3), abs=1e-6)
    assert rows[1]["bleu"] == pytest.approx(BLEU2, abs=1e-6) and rows[1]["exact"] == 0.0
    assert rows[2]["bleu"] == pytest.approx(BLEU1, abs=1e-6)
    assert rows[3] == {"lo": 10, "hi": 20, "exact": 0.0, "bleu": 0.0, "chrf": 0.0, "n": 0}


def test_length_buckets_default_is_five_quintiles():
    assert metrics.length_buckets(list(range(1, 11))) == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]


def test_without_sacrebleu_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "sacrebleu", None)  # import sacrebleu → ImportError
    with pytest.raises(ValueError) as e:
        metrics.scores(["a"], ["a"])
    assert str(e.value) == "BLEU and chrF need sacrebleu: pip install 'attnlab[lab]'"
