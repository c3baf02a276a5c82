"""``attnlab experiment vision`` with neither --quick nor --full runs the default size (5 seeds, not the
full run's 10); ``attnlab experiment faithfulness --checkpoint DIR`` loads DIR as a seq2seq model only (a GPT or a
captioner is refused with load_model's one line, exit 2, before anything is measured) and splits the data
of the very model it loaded."""

from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path

import pytest

import attnlab.experiments.faithfulness as faithfulness
import attnlab.experiments.vision as vision
import attnlab.train.heldout as heldout
from attnlab import pretrained
from attnlab.cli import main
from attnlab.experiments.vision import VisionConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_vision_without_a_size_flag_runs_the_default_size(monkeypatch, capsys):
    seen = []
    result = types.SimpleNamespace(table=lambda: "TABLE", files=[])
    monkeypatch.setattr(vision, "run", lambda cfg: seen.append(cfg) or result)
    assert main(["experiment", "vision"]) == 0
    assert seen == [replace(VisionConfig(), out_dir="runs/vision")]
    # the documented default: 5 seeds (the full run has 10), no smoke-run note
    assert len(seen[0].seeds) == 5 and len(VisionConfig.full().seeds) == 10
    assert capsys.readouterr().out == "\nTABLE\n"


@pytest.fixture
def measured(monkeypatch):
    seen = {}
    monkeypatch.setattr(
        faithfulness, "measure", lambda model, part, cfg: seen.setdefault("measured", {})
    )
    monkeypatch.setattr(faithfulness, "write", lambda results, out: seen.update(written=out))
    monkeypatch.setattr(faithfulness, "table", lambda results: "TABLE\n")
    return seen


@pytest.mark.parametrize("name, kind", [("char-gpt", "gpt"), ("caption", "captioner")])
def test_a_run_that_is_not_a_seq2seq_model_is_refused(measured, capsys, name, kind):
    run = str(pretrained.folder(name))
    assert main(["experiment", "faithfulness", "--checkpoint", run, "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"attnlab experiment faithfulness: error: {run} holds a {kind!r} model; expected 'seq2seq'\n"
    )
    assert measured == {}


def test_the_split_is_of_the_model_it_loaded(monkeypatch, measured, capsys, tmp_path):
    run = pretrained.folder("zh-en-numbers")

    def split(loaded, name, data_path):
        measured["split"] = (Path(loaded.path), loaded.kind, loaded.model.config.decoder, name)
        return types.SimpleNamespace(name="numbers-zh-en"), [([5, 6], [7])]

    monkeypatch.setattr(heldout, "translation_split", split)
    argv = ["experiment", "faithfulness", "--checkpoint", str(run), "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert measured["split"] == (Path(run), "seq2seq", "bahdanau", "test")
    assert measured["written"] == str(tmp_path)
