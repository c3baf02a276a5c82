"""Checkpoints: atomic writes, safetensors, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def test_round_trip_and_overwrite(tmp_path):
    d = tmp_path / "run"
    save_checkpoint(d, {"w": torch.arange(3.0)}, {"layers": 2}, {"vocab.json": '["a"]'})
    save_checkpoint(d, {"w": torch.ones(2)}, {"layers": 3})
    tensors, cfg, path = load_checkpoint(d)
    assert torch.equal(tensors["w"], torch.ones(2)) and cfg["layers"] == 3 and cfg["format"] == 1
    assert not (path / "vocab.json").exists()  # the new checkpoint replaced the old folder whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock", "run"]  # no temporary folders left


def test_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint folder"):
        load_checkpoint(tmp_path / "none")
    d = save_checkpoint(tmp_path / "c", {"w": torch.ones(1)}, {})
    (d / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(d)
    (d / "config.json").write_text("{")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint(d)
    (d / "config.json").write_text(json.dumps({"format": 99, "attnlab_version": "9.0"}))
    with pytest.raises(CheckpointError, match="format 99"):
        load_checkpoint(d)
    (d / "config.json").unlink()
    with pytest.raises(CheckpointError, match="missing config.json"):
        load_checkpoint(d)


# -- a kill at every step of the swap -------------------------------------------------------------

_KILL = """
import os, sys, torch
from attnlab.train import checkpoint as C
step = sys.argv[2]
C._on_step = lambda name: os._exit(9) if name == step else None
C.save_checkpoint(sys.argv[1], {"w": torch.full((3,), 2.0)}, {"run": "new"})
"""


@pytest.mark.parametrize("step", ["written", "complete", "old moved", "new moved", "old removed"])
def test_a_kill_at_any_step_of_the_swap_leaves_a_complete_checkpoint(tmp_path, step):
    import subprocess
    import sys

    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.full((3,), 1.0)}, {"run": "old"})
    proc = subprocess.run([sys.executable, "-c", _KILL, str(run), step], capture_output=True, text=True)
    assert proc.returncode == 9, proc.stderr  # killed at that step, no clean-up ran
    before = sorted(p.name for p in tmp_path.iterdir())
    tensors, config, _ = load_checkpoint(run)  # reads whatever the kill left whole
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # and writes nothing
    w = float(tensors["w"][0])
    # until the old folder moves aside it stands (a complete new copy beside it is dropped); from then on the new one
    expect = {"written": ("old", 1.0), "complete": ("old", 1.0), "old moved": ("new", 2.0),
              "new moved": ("new", 2.0), "old removed": ("new", 2.0)}[step]
    assert (config["run"], w) == expect
    save_checkpoint(run, {"w": torch.full((3,), 3.0)}, {"run": "next"})  # saving goes on
    assert float(load_checkpoint(run)[0]["w"][0]) == 3.0
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == [".run.lock", "run"], leftovers  # and cleaned up the incomplete and stale copies


def test_nothing_of_the_users_is_overwritten_or_deleted(tmp_path):
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not an attnlab checkpoint .*notes.txt.* left alone"):
        save_checkpoint(mine, {"w": torch.zeros(1)}, {})
    assert (mine / "notes.txt").read_text() == "keep me" and (mine / "sub").is_dir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("data")
    with pytest.raises(CheckpointError, match="is a file, not a folder"):
        save_checkpoint(a_file, {"w": torch.zeros(1)}, {})
    assert a_file.read_text() == "data"
    empty = tmp_path / "empty"
    empty.mkdir()
    save_checkpoint(empty, {"w": torch.zeros(1)}, {})  # an empty folder may take a checkpoint
    save_checkpoint(empty, {"w": torch.ones(1)}, {})  # and so may our own checkpoint
    assert float(load_checkpoint(empty)[0]["w"][0]) == 1.0


def test_a_checkpoint_from_before_the_file_list_is_replaced_and_the_users_files_carried(tmp_path):
    """Older attnlab wrote an empty ``.complete``: the new save replaces the files it writes itself
    (and config.json, model.safetensors); anything else in the folder moves into the new checkpoint."""
    from safetensors.torch import save_file

    run = tmp_path / "run"
    run.mkdir()
    save_file({"w": torch.zeros(2)}, str(run / "model.safetensors"))
    (run / "config.json").write_text(json.dumps({"format": 1}))
    (run / "vocab.json").write_text('["old"]')
    (run / "notes.txt").write_text("mine")
    (run / ".complete").write_text("")
    save_checkpoint(run, {"w": torch.ones(2)}, {"n": 2}, {"vocab.json": '["new"]'})
    tensors, config, _ = load_checkpoint(run)
    assert torch.equal(tensors["w"], torch.ones(2)) and config["n"] == 2
    assert (run / "vocab.json").read_text() == '["new"]' and (run / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.lock", "run"]
