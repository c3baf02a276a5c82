"""One writer per checkpoint folder: a second run is refused with a clear error, never a race;
a killed run's lock does not outlive it; readers need no lock and write nothing."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

import pytest
import torch

from attnlab.train.checkpoint import (
    CheckpointError,
    check_out_dir,
    load_checkpoint,
    recover,
    save_checkpoint,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@contextmanager
def another_run_holding(run):
    """A forked process that has claimed ``run`` (as ``attnlab train`` does) and waits; killed at the end."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            check_out_dir(run)
            os.write(ready_w, b"1")
            signal.pause()
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"1", "the other run could not claim the folder"
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)  # SIGKILL: no clean-up of its own runs
        os.waitpid(pid, 0)
        os.close(ready_r)


def test_a_second_writer_is_refused_while_a_run_holds_the_folder(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.ones(2)}, {"n": 1})
    with another_run_holding(run):
        for attempt in (lambda: save_checkpoint(run, {"w": torch.zeros(2)}, {"n": 2}),
                        lambda: check_out_dir(run), lambda: recover(run)):
            with pytest.raises(CheckpointError, match=r"run is being written by another attnlab run .*\.run\.lock"):
                attempt()
        tensors, config, _ = load_checkpoint(run)  # reading needs no lock
        assert config["n"] == 1 and torch.equal(tensors["w"], torch.ones(2))
    # the holder was SIGKILLed: its lock went with it, nothing stale is left to remove by hand
    save_checkpoint(run, {"w": torch.zeros(2)}, {"n": 2})
    assert load_checkpoint(run)[1]["n"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock", "run"]


def test_under_torchrun_only_rank_0_claims_the_folder(tmp_path, monkeypatch):
    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.ones(2)}, {})
    with another_run_holding(run):
        monkeypatch.setenv("RANK", "1")  # a worker of the holding run checks the folder, and only checks it
        assert check_out_dir(run) == run
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(CheckpointError, match="another attnlab run"):
            check_out_dir(run)


def test_a_run_may_save_again_and_again_under_its_own_claim(tmp_path):
    run = tmp_path / "run"
    check_out_dir(run)
    for n in range(3):
        save_checkpoint(run, {"w": torch.full((2,), float(n))}, {"n": n})
    assert load_checkpoint(run)[1]["n"] == 2


def test_the_current_folder_is_refused_as_a_checkpoint_folder(tmp_path, monkeypatch):
    """A save replaces the folder whole: the process (and the user's shell) would be left in a deleted one."""
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    monkeypatch.chdir(run / "sub")
    for spelled in (".", "..", run):
        with pytest.raises(CheckpointError, match="is the current folder or holds it"):
            save_checkpoint(spelled, {"w": torch.ones(2)}, {})
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["run", "sub"]


@pytest.mark.parametrize("verb", [["train", "lm", "--steps", "1"], ["train", "seq2seq", "--steps", "1"],
                                  ["train", "caption", "--epochs", "1"]])
def test_a_second_training_command_on_the_folder_is_one_line(tmp_path, capsys, verb):
    from attnlab.cli import main

    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.ones(2)}, {"n": 1})
    with another_run_holding(run):
        code = main([*verb, "--out", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "being written by another attnlab run" in err, err
    assert load_checkpoint(run)[1]["n"] == 1

