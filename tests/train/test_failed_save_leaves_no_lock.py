"""A save that fails (a full disk: every write raises ENOSPC) leaves nothing it made behind: no folder of
its own and no lock file that it created. A lock file that was there before (an earlier run's) stays."""

from __future__ import annotations

import contextlib
import errno
import io
import os

import pytest
import torch

from attnlab.cli import main
from attnlab.train.checkpoint import CheckpointError, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def full_disk(monkeypatch):
    def write(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return lambda: monkeypatch.setattr(os, "write", write)


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_first_save_on_a_full_disk_leaves_nothing(tmp_path, full_disk):
    full_disk()
    run = tmp_path / "run"
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(run, {"w": torch.ones(2)}, {"n": 1})
    assert str(e.value) == (f"could not save the checkpoint {run}: No space left on device; "
                            "the last checkpoint there (if any) is unchanged")
    assert _names(tmp_path) == []


def test_a_failed_save_keeps_a_lock_file_it_did_not_make(tmp_path, full_disk, monkeypatch):
    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.ones(2)}, {"n": 1})
    assert _names(tmp_path) == [".run.lock", "run"]
    full_disk()
    with pytest.raises(CheckpointError):
        save_checkpoint(run, {"w": torch.zeros(2)}, {"n": 2})
    monkeypatch.undo()
    assert _names(tmp_path) == [".run.lock", "run"]
    assert save_checkpoint(run, {"w": torch.zeros(2)}, {"n": 2}) == run  # the lock is free again


def test_a_training_run_whose_first_save_fails_leaves_nothing(tmp_path, full_disk):
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question. " * 20, encoding="utf-8")
    runs = tmp_path / "runs"
    runs.mkdir()
    full_disk()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "lm", "--text", str(text), "--out", str(runs / "lm"), "--steps", "1", "--batch-size", "2",
                     "--block-size", "8", "--dim", "8", "--num-layers", "1", "--num-heads", "1", "--eval-batches", "1"])
    assert code == 2
    assert err.getvalue().strip() == (f"attnlab train lm: error: could not save the checkpoint {runs / 'lm'}: No space "
                                      "left on device; the last checkpoint there (if any) is unchanged")
    assert _names(runs) == []
