"""The state a run keeps in config.json (its step, its loss counters, its kind) is checked when the
checkpoint is read, for a resume and for any other reader: a value no run writes is one
``CheckpointError`` naming the field, the value and what it must be, never a run that goes on from it."""

from __future__ import annotations

import json

import pytest
import torch

from attnlab.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

GOOD = {"step": 4, "loss_sum": 2.5, "loss_n": 8, "train_time": 0.25}


@pytest.fixture
def run(tmp_path):
    return save_checkpoint(tmp_path / "run", {"w": torch.ones(2)},
                           {"kind": "char-lm", "model": {"kind": "gpt"}, "state": dict(GOOD)})


def _edit(run, **changes) -> None:
    cfg = json.loads((run / "config.json").read_text())
    for path, value in changes.items():
        node, *rest = path.split("__")
        if rest:
            cfg[node][rest[0]] = value
        else:
            cfg[node] = value
    (run / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("field, value, expected", [
    ("step", 0, "an integer >= 1"),  # a checkpoint is saved after a step
    ("step", -3, "an integer >= 1"),
    ("step", 2.0, "an integer >= 1"),
    ("step", True, "an integer >= 1"),
    ("step", "4", "an integer >= 1"),
    ("step", 10**12, "an integer <= 1000000000"),
    ("epoch", -1, "an integer >= 0"),
    ("loss_n", -2, "an integer >= 0"),
    ("loss_n", 2.5, "an integer >= 0"),
    ("loss_sum", float("nan"), "a finite number"),
    ("loss_sum", None, "a finite number"),
    ("train_time", -1.0, "a finite number >= 0"),
    ("train_time", float("inf"), "a finite number >= 0"),
])
def test_a_state_counter_out_of_range_is_named(run, field, value, expected):
    _edit(run, **{f"state__{field}": value})
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(run)
    shown = "null" if value is None else repr(value)
    assert str(e.value) == f"{run}/config.json: state.{field} must be {expected}; got {shown}"


@pytest.mark.parametrize("kind, message", [
    ("captioner", "kind 'captioner' is not the kind of its model ('gpt')"),
    (3, "kind must be a string (a run's kind, e.g. 'char-lm'); got 3"),
    (None, "kind must be a string (a run's kind, e.g. 'char-lm'); got null"),
])
def test_a_wrong_kind_is_named(run, kind, message):
    _edit(run, kind=kind)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(run)
    assert str(e.value) == f"{run}/config.json: {message}"


def test_a_state_that_is_not_an_object_is_named(run):
    _edit(run, state=[4])
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(run)
    assert str(e.value) == f"{run}/config.json: state must be an object; got [4]"


def test_the_state_a_run_writes_is_read(run):
    assert load_checkpoint(run)[1]["state"] == GOOD
