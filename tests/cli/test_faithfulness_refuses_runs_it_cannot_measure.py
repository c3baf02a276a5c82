"""``attnlab experiment faithfulness --run DIR``: a run whose decoder has no attention, and a run whose data
has no test sentences, are each refused with one exact line (exit 2) before anything is measured."""

from __future__ import annotations

import types

import pytest

import attnlab.experiments.faithfulness as faithfulness
import attnlab.train.heldout as heldout
import attnlab.train.load as load
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def measured(monkeypatch):
    seen = []
    monkeypatch.setattr(faithfulness, "measure", lambda *a: seen.append(a) or {})
    monkeypatch.setattr(faithfulness, "write", lambda *a: seen.append(a))
    return seen


def _run(decoder):
    return types.SimpleNamespace(
        model=types.SimpleNamespace(config=types.SimpleNamespace(decoder=decoder))
    )


def test_a_run_without_attention_is_refused(monkeypatch, measured, capsys):
    monkeypatch.setattr(load, "load_model", lambda path, kind: _run("none"))
    assert main(["experiment", "faithfulness", "--checkpoint", "runs/x"]) == 2
    assert capsys.readouterr().err == (
        "attnlab experiment faithfulness: error: runs/x has no attention (decoder 'none'); train one with "
        "--attention bahdanau or luong\n"
    )
    assert measured == []


def test_a_run_without_test_sentences_is_refused(monkeypatch, measured, capsys):
    monkeypatch.setattr(load, "load_model", lambda path, kind: _run("luong"))
    monkeypatch.setattr(
        heldout,
        "translation_split",
        lambda loaded, split, path: (types.SimpleNamespace(name="ding-de-en"), []),
    )
    assert main(["experiment", "faithfulness", "--checkpoint", "runs/x"]) == 2
    assert (
        capsys.readouterr().err
        == "attnlab experiment faithfulness: error: ding-de-en has no test sentences\n"
    )
    assert measured == []
