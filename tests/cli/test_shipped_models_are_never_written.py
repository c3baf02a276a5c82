"""The models shipped inside the package are read, never written: a training command, an experiment,
``caption --out`` or ``save_checkpoint`` aimed at one (by its path, or through a symlink) is refused in
one line whatever the flags (``--overwrite`` included), and no file in the package is opened for writing."""

from __future__ import annotations

import contextlib
import io
import os

import pytest
import torch

from attnlab import pretrained
from attnlab._files import PACKAGE, claim
from attnlab.cli import main
from attnlab.train.checkpoint import CheckpointError, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

GPT = pretrained.folder("char-gpt")


def _refusal(path) -> str:
    return (f"{path} is inside the attnlab package ({PACKAGE}), which holds its shipped models; attnlab never "
            "writes there (--overwrite included): choose another --out")


@pytest.fixture
def writes_in_the_package(monkeypatch):
    """Every ``os.open`` of a path inside the package that could write or create, recorded."""
    seen, real = [], os.open

    def watched(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and os.path.realpath(path).startswith(str(PACKAGE)):
            seen.append(str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", watched)
    return seen


def _bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
@pytest.mark.parametrize("verb", [["train", "lm", "--steps", "1"], ["train", "seq2seq", "--steps", "1"],
                                  ["train", "caption", "--epochs", "1"]])
def test_training_into_a_shipped_model_is_refused(tmp_path, writes_in_the_package, verb, flags):
    before = _bytes(GPT)
    link = tmp_path / "looks-like-mine"
    link.symlink_to(GPT)
    for out in (GPT, link):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([*verb, "--out", str(out), *flags])
        assert (code, err.getvalue()) == (2, f"attnlab {' '.join(verb[:2])}: error: {_refusal(out)}\n")
    assert writes_in_the_package == []
    assert _bytes(GPT) == before and not list(GPT.parent.glob(".*.lock"))


def test_save_checkpoint_refuses_the_package(writes_in_the_package):
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(GPT, {"w": torch.ones(1)}, {})
    assert str(e.value) == _refusal(GPT)
    assert writes_in_the_package == []


def test_experiments_and_caption_refuse_the_package(tmp_path, writes_in_the_package):
    with pytest.raises(PermissionError) as e:
        claim(GPT, ["table.md"])
    assert str(e.value) == _refusal(GPT)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["experiment", "distance", "--out", str(GPT / "results")])
    assert (code, err.getvalue()) == (2, f"attnlab experiment distance: error: {_refusal(GPT / 'results')}\n")
    assert writes_in_the_package == [] and not (GPT / "results").exists()
