"""Translation metrics (train.metrics): the bootstrap intervals against resampled corpora scored
by sacrebleu itself with the same seeded draws, the scores of an empty set, and each refusal's text."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from attnlab.train.metrics import exact_match, intervals, scores

HYPS = [
    "the cat sat on the mat",
    "a dog barks",
    "hello world",
    "one two three four",
    "it rains today",
]
REFS = [
    "the cat sat on the mat",
    "the dog barks",
    "hello there world",
    "one two three four",
    "it is raining today",
]


def _bootstrap(resamples: int, seed: int, level: float) -> dict[str, tuple[float, float]]:
    """Each resample drawn as documented (n indices with replacement, one seeded generator) and
    scored again as a corpus by sacrebleu; percentile interval of each metric."""
    rng = np.random.default_rng(seed)
    n = len(REFS)
    vals = {"exact": [], "bleu": [], "chrf": []}
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        h, r = [HYPS[i] for i in idx], [REFS[i] for i in idx]
        vals["exact"].append(100.0 * np.mean([a == b for a, b in zip(h, r)]))
        vals["bleu"].append(sacrebleu.corpus_bleu(h, [r]).score)
        vals["chrf"].append(sacrebleu.corpus_chrf(h, [r]).score)
    tail = 100 * (1 - level) / 2
    return {k: (np.percentile(v, tail), np.percentile(v, 100 - tail)) for k, v in vals.items()}


@pytest.mark.parametrize(("seed", "level"), [(0, 0.95), (3, 0.8)])
def test_bootstrap_intervals_are_those_of_resampled_corpora(seed, level):
    got = intervals(HYPS, REFS, resamples=40, seed=seed, level=level)
    want = _bootstrap(40, seed, level)
    assert list(got) == ["exact", "bleu", "chrf"]
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
        assert isinstance(got[k][0], float)


def test_the_default_interval_is_a_thousand_resamples_at_95_percent_seed_0():
    got = intervals(HYPS[:2], REFS[:2])
    rng = np.random.default_rng(0)
    exact = [
        100.0 * np.mean([HYPS[i] == REFS[i] for i in rng.integers(0, 2, 2)]) for _ in range(1000)
    ]
    assert got["exact"] == pytest.approx((np.percentile(exact, 2.5), np.percentile(exact, 97.5)))


def test_scores_of_nothing_and_the_refusals():
    assert scores([], []) == {"exact": 0.0, "bleu": 0.0, "chrf": 0.0, "n": 0}
    s = scores(HYPS, REFS)
    assert s["n"] == 5 and s["exact"] == 40.0
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    with pytest.raises(ValueError) as err:
        exact_match(["a"], ["a", "b"])
    assert str(err.value) == "1 hypotheses for 2 references"
    assert exact_match([], []) == 0.0
    for h, r in ((["a"], ["a", "b"]), ([], [])):
        with pytest.raises(ValueError) as err:
            intervals(h, r)
        assert str(err.value) == (
            "intervals need as many hypotheses as references, at least one; "
            f"got {len(h)} and {len(r)}"
        )
