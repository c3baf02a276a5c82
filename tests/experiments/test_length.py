"""The length experiment: the bootstrap interval by hand-checkable properties; the quick CLI run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.cli import main
from attnlab.experiments.length import bootstrap, plot

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


def test_plot_draws_each_model_at_the_bucket_midpoints(tmp_path, monkeypatch):
    """Two buckets of source length, [3, 6] and [7, 12]: the points sit at 4.5 and 9.5 words, one line and one
    band per model on each panel (BLEU left, chrF right); the figure is read back where it is closed."""
    plt = pytest.importorskip("matplotlib.pyplot")
    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    rows = {"none": [(10.0, 8.0, 12.0, 30.0, 28.0, 33.0), (5.0, 4.0, 7.0, 20.0, 18.0, 21.0)],
            "luong": [(40.0, 35.0, 44.0, 60.0, 58.0, 61.0), (38.0, 30.0, 41.0, 57.0, 50.0, 60.0)]}
    results = {"config": {"data": "numbers-en-de"}, "buckets": [[3, 6], [7, 12]],
               "models": {dec: {"by_length": [{"bleu": b, "bleu_ci": [bl, bh], "chrf": c, "chrf_ci": [cl, ch]}
                                              for b, bl, bh, c, cl, ch in rs]} for dec, rs in rows.items()}}
    path = tmp_path / "length.png"
    assert plot(results, path) == path and path.stat().st_size > 1000
    (fig,) = closed
    try:
        for ax, (col, name) in zip(fig.axes, ((0, "BLEU"), (3, "chrF"))):
            assert ax.get_ylabel() == f"{name} (test)"
            assert ax.get_xlabel() == "source sentence length (words), numbers-en-de"
            assert [t.get_text() for t in ax.get_legend().get_texts()] == ["none", "luong"]
            for line, band, rs in zip(ax.lines, ax.collections, rows.values()):
                np.testing.assert_array_equal(line.get_xdata(), [4.5, 9.5])
                np.testing.assert_array_equal(line.get_ydata(), [r[col] for r in rs])
                xy = band.get_paths()[0].vertices
                assert xy[:, 0].min() == 4.5 and xy[:, 0].max() == 9.5
                assert xy[:, 1].min() == min(r[col + 1] for r in rs) and xy[:, 1].max() == max(r[col + 2] for r in rs)
    finally:
        monkeypatch.undo()
        plt.close(fig)
