"""What the one loop (train.fit.fit) writes: the checkpoint's tensors (names, shapes, dtypes) and
config.json's entries and state (the running loss of an unfinished interval, its count, the step),
the run log's records (keys, the interval mean loss against SGD by hand), the progress lines with
the run's name, the first step's line, and a resume that continues the run log and its wall time."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnlab.train import runlog
from attnlab.train.fit import FitConfig, fit
from tests.train.test_fit import Linear, by_hand


class AdamLinear(Linear):
    def optimizer(self):
        return torch.optim.Adam(self.model.parameters(), lr=0.01)

    def checkpoint(self, step, records):
        return (
            {"extra.t": torch.arange(3)},
            {"note": "n", "state": {"epoch": 7}},
            {"notes.txt": "hello\n"},
        )


def test_the_checkpoint_holds_weights_moments_generators_and_the_running_state(tmp_path):
    out = tmp_path / "run"
    r = fit(
        AdamLinear(), FitConfig(steps=5, log_every=2, save_every=3, clip=0.0), out=out, stop_after=4
    )
    assert r.step == 4
    tensors = load_file(str(out / "model.safetensors"))
    assert sorted(tensors) == [
        "extra.t",
        "model.bias",
        "model.weight",
        "optim.0.exp_avg",
        "optim.0.exp_avg_sq",
        "optim.0.step",
        "optim.1.exp_avg",
        "optim.1.exp_avg_sq",
        "optim.1.step",
        "rng.torch",
    ]
    assert (
        tensors["model.weight"].shape == (1, 3) and tensors["model.weight"].dtype == torch.float32
    )
    assert tensors["optim.0.exp_avg"].shape == (1, 3) and tensors["optim.1.exp_avg_sq"].shape == (
        1,
    )
    assert float(tensors["optim.0.step"]) == 3.0  # saved after the third step
    assert tensors["rng.torch"].dtype == torch.uint8 and tensors["extra.t"].tolist() == [0, 1, 2]
    config = json.loads((out / "config.json").read_text())
    assert (
        list(config) == ["format", "attnlab_version", "model", "note", "state"]
        and config["format"] == 1
    )
    assert config["model"] == {"kind": "linear", "in": 3} and config["note"] == "n"
    st = config["state"]
    assert set(st) == {"step", "valid", "loss_sum", "loss_n", "train_time", "epoch"}
    assert (st["step"], st["valid"], st["loss_n"], st["epoch"]) == (3, {}, 2, 7)
    assert isinstance(st["loss_n"], int) and st["train_time"] > 0
    assert st["loss_sum"] > 0 and (out / "notes.txt").read_text() == "hello\n"
    assert [r["step"] for r in runlog.read(out)] == [2]  # the log as of the checkpoint's step


def test_the_saved_open_interval_is_the_sum_of_its_squared_errors(tmp_path):
    out = tmp_path / "run"
    fit(Linear(), FitConfig(steps=5, log_every=2, save_every=3, clip=0.0), out=out, stop_after=4)
    _, _, losses = by_hand(3)
    st = json.loads((out / "config.json").read_text())["state"]
    assert st["loss_sum"] == pytest.approx(2 * losses[2], rel=1e-5) and st["loss_n"] == 2
    fit(Linear(), FitConfig(steps=4, log_every=2, save_every=4, clip=0.0), out=tmp_path / "closed")
    st = json.loads((tmp_path / "closed" / "config.json").read_text())["state"]
    assert (st["loss_sum"], st["loss_n"], st["step"]) == (
        0.0,
        0,
        4,
    )  # logged at the end: nothing open


def test_records_lines_and_the_first_steps_line(tmp_path):
    lines: list[str] = []
    r = fit(
        Linear(),
        FitConfig(steps=5, log_every=2, clip=0.0, desc="exp"),
        out=tmp_path / "run",
        log=lines.append,
    )
    _, _, losses = by_hand(5)
    assert [set(x) for x in r.history] == [{"step", "loss", "tokens_per_s", "wall_s"}] * 3
    np.testing.assert_allclose(
        [x["loss"] for x in r.history],
        [np.mean(losses[0:2]), np.mean(losses[2:4]), losses[4]],
        rtol=1e-5,
    )
    assert lines[0].startswith(f"exp: step 1/5  loss {losses[0]:.4f}  (first step ") and lines[
        0
    ].endswith(" s)")
    assert lines[1:] == [
        f"exp: step {s}  loss {v['loss']:.4f}" for s, v in zip((2, 4, 5), r.history)
    ]
    walls = [x["wall_s"] for x in r.history]
    assert walls == sorted(walls) and all(w == round(w, 3) for w in walls)
    assert runlog.read(tmp_path / "run") == r.history  # the log saved with the last checkpoint
    lines.clear()
    fit(Linear(), FitConfig(steps=2, log_every=1, clip=0.0), log=lines.append)
    assert [m.split("  loss")[0] for m in lines] == [
        "train: step 1",
        "train: step 2",
    ]  # no first-step line
    lines.clear()
    fit(
        Linear(), FitConfig(steps=1, clip=0.0), log=lines.append
    )  # the only step is the last: logged
    assert len(lines) == 1 and lines[0].startswith("train: step 1  loss ")


def test_a_resumed_run_continues_its_log_and_its_wall_time(tmp_path):
    out = tmp_path / "run"
    cfg = FitConfig(steps=6, log_every=2, save_every=2, clip=0.0)
    fit(Linear(), cfg, out=out, stop_after=5)  # checkpoint at step 4; step 5 lost
    first = runlog.read(out)
    assert [x["step"] for x in first] == [2, 4]
    r = fit(Linear(), cfg, out=out, resume=True)
    assert [x["step"] for x in r.history] == [2, 4, 6] and r.history[:2] == first
    assert r.history[2]["wall_s"] >= first[1]["wall_s"]  # the wall time goes on from the log's last
    _, _, losses = by_hand(6)
    assert r.history[2]["loss"] == pytest.approx(np.mean(losses[4:6]), rel=1e-5)
    assert r.step == 6 and r.train_loss == pytest.approx(np.mean(losses[4:6]), rel=1e-5)


def test_the_first_steps_line_shows_the_loss_averaged_over_the_processes(tmp_path, monkeypatch):
    """Under data or context parallelism each process holds its share of the step's loss: the line shows
    the runtime's mean over the processes (faked here as sum 3.0 over count 4 of the others added)."""
    from attnlab.train import runtime as rt_module

    seen = []

    def mean(self, local_sum, local_n):
        seen.append((local_sum, local_n))
        return (local_sum + 3.0) / (local_n + 4)

    monkeypatch.setattr(rt_module.Runtime, "mean", mean)
    lines: list[str] = []
    fit(Linear(), FitConfig(steps=3, log_every=3, clip=0.0, desc="cp"), out=tmp_path / "run", log=lines.append)
    local_sum, local_n = seen[0]
    assert lines[0].startswith(f"cp: step 1/3  loss {(local_sum + 3.0) / (local_n + 4):.4f}  (first step ")
