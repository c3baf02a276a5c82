"""The length experiment: the bootstrap interval by hand-checkable properties; the quick CLI run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.experiments.length import bootstrap

sacrebleu = pytest.importorskip("sacrebleu")


def test_bootstrap_of_identical_sentences_is_a_point():
    hyps = refs = ["the cat sat on the mat", "a dog barks loudly today"] * 5
    ci = bootstrap(hyps, refs, 30, seed=0)
    for k in ("bleu", "chrf"):
        assert ci[k] == pytest.approx((100.0, 100.0))


def test_bootstrap_interval_holds_the_corpus_score():
    refs = [f"sentence number {i} is here now" for i in range(40)]
    hyps = [r if i % 2 else "something else entirely said" for i, r in enumerate(refs)]
    ci = bootstrap(hyps, refs, 100, seed=1)
    full = sacrebleu.corpus_chrf(hyps, [refs]).score
    assert ci["chrf"][0] < full < ci["chrf"][1]
    assert ci["chrf"][1] - ci["chrf"][0] > 1.0  # half the sentences are wrong: the interval has width


@pytest.mark.skipif(not Path("/usr/share/trans/de-en").is_file(), reason="the Ding dictionary is absent: apt-get install trans-de-en")
def test_quick_run(tmp_path, capsys):
    assert main(["experiment", "length", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    assert "smoke-run figures" in capsys.readouterr().out
    res = json.loads((tmp_path / "results.json").read_text())
    assert set(res["models"]) == {"none", "bahdanau", "luong"}
    for r in res["models"].values():
        for row in r["by_length"]:
            assert row["bleu_ci"][0] <= row["bleu_ci"][1] and row["chrf_ci"][0] <= row["chrf_ci"][1]
    assert (tmp_path / "length.png").stat().st_size > 1000
