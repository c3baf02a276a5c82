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
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folders left


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
