"""The alignment experiment: AER, the diagonal, IBM Model 1 and links from weights, by hand; the quick CLI run."""

from __future__ import annotations

import importlib.util
import json
import math
import time

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.experiments import ibm1
from attnlab.experiments.alignment import aer, corpus_aer, diagonal, from_weights


def test_aer_by_hand():
    gold = {(0, 0), (1, 1), (2, 1)}
    pred = {(0, 0), (1, 1), (1, 2)}
    assert math.isclose(aer(pred, gold), 1 - 2 * 2 / 6)
    assert aer(set(), set()) == 0.0 and aer({(0, 0)}, set()) == 1.0
    # corpus AER sums the counts first: (2 + 1) hits of (3 + 3) + (1 + 2) links
    assert math.isclose(corpus_aer([pred, {(0, 0)}], [gold, {(0, 0), (1, 0)}]), 1 - 2 * 3 / 9)


def test_diagonal_and_links_from_weights():
    assert diagonal(4, 2) == {(1, 0), (3, 1)}  # ⌊0.5 · 2⌋, ⌊1.5 · 2⌋
    assert diagonal(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}  # ⌊0.25⌋, ⌊0.75⌋, ⌊1.25⌋, ⌊1.75⌋
    assert diagonal(3, 3) == {(0, 0), (1, 1), (2, 2)}
    w = torch.tensor([[0.7, 0.2, 0.1], [0.35, 0.25, 0.4]])  # (T = 2, S = 3)
    assert from_weights(w, None) == {(0, 0), (2, 1)}
    assert from_weights(w, 0.3) == {(0, 0), (0, 1), (2, 1)}


def test_ibm1_learns_a_lexicon_by_hand():
    # "das haus" / "the house", "das buch" / "the book", "ein buch" / "a book" (Koehn's example)
    pairs = [(["das", "haus"], ["the", "house"]), (["das", "buch"], ["the", "book"]), (["ein", "buch"], ["a", "book"])]
    t = ibm1.train(pairs, iterations=20)
    assert t[("the", "das")] > 0.9 and t[("book", "buch")] > 0.9 and t[("house", "haus")] > 0.9
    assert ibm1.align(["das", "buch"], ["the", "book"], t) == {(0, 0), (1, 1)}
    # one EM round from uniform, computed by hand: with NULL, each target word's 3 sources share 1/3;
    # c(the, das) = 1/3 + 1/3, total(das) = 4 · 1/3, so t(the | das) = 0.5
    t1 = ibm1.train(pairs, iterations=1)
    assert math.isclose(t1[("the", "das")], 0.5) and math.isclose(t1[("house", "haus")], 0.5)


def test_quick_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("sacrebleu")
    try:
        from attnlab.data.bible import data_root

        data_root()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from attnlab.experiments import alignment

    built, real = [], alignment.Seq2Seq
    monkeypatch.setattr(alignment, "Seq2Seq", lambda config: built.append(config) or real(config))
    t0 = time.perf_counter()
    assert main(["experiment", "alignment", "--quick", "--quiet", "--out", str(tmp_path)]) == 0
    took = time.perf_counter() - t0
    assert "smoke-run figures" in capsys.readouterr().out
    raw = (tmp_path / "results.json").read_text(encoding="utf-8")
    assert '"bahdanau ≥0.3"' in raw  # written as UTF-8 text a reader can read, not as \u escapes
    res = json.loads(raw)
    assert 0 < max(res["seconds"].values()) <= res["wall_seconds"] <= took  # each method's time within the run's
    # each decoder is built at the quick size: embeddings 16, states 24, attention 24
    assert [(c.decoder, c.emb_dim, c.hidden, c.attn_dim) for c in built] == [("bahdanau", 16, 24, 24), ("luong", 16, 24, 24)]
    methods = {"diagonal", "ibm1", "bahdanau argmax", "bahdanau ≥0.3", "luong argmax", "luong ≥0.3"}
    assert set(res["aer"]) == methods
    assert all(0.0 <= a <= 1.0 for a in res["aer"].values())
    assert all(len(v) == len(res["buckets"]) for v in res["aer_by_length"].values())
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / "alignment.png").stat().st_size > 1000


def test_the_plot_shows_aer_in_percent_at_each_buckets_middle(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    from attnlab.experiments import alignment

    kept = []
    monkeypatch.setattr(plt, "close", kept.append)  # keep the figure to read it back
    res = {"buckets": [[1, 10], [11, 20]], "aer_by_length": {"ibm1": [0.5, 0.25], "luong argmax": [0.2, 0.1]},
           "n_test": 7}
    assert alignment.plot(res, tmp_path / "a.png") == tmp_path / "a.png" and (tmp_path / "a.png").exists()
    ax = kept[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source verse length (words)", "AER (%), lower is better")
    assert ax.get_title() == "Alignment error on 7 held-out verses"
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_allclose(lines["ibm1"].get_xydata(), [[5.5, 50.0], [15.5, 25.0]])
    np.testing.assert_allclose(lines["luong argmax"].get_xydata(), [[5.5, 20.0], [15.5, 10.0]])
    assert lines["ibm1"].get_linestyle() == "--" and lines["luong argmax"].get_linestyle() == "-"
