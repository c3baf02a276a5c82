"""The training loop's side of a run on a task written here (one weight, a loss whose value is set
by the step, a clock that ticks a set amount per reading): the lines it prints and their prefix, the
first-step line, the records with their wall time, what the checkpoint's config.json holds after a
step, every refusal of a resume in full, and a wall-time budget that stops the run early."""

from __future__ import annotations

import json
import types

import pytest
import torch

from attnlab.train import fit as fit_module
from attnlab.train import runlog
from attnlab.train.checkpoint import CheckpointError, load_checkpoint
from attnlab.train.finite import NonFiniteError
from attnlab.train.fit import FitConfig, Step, fit, model_entry


class Toy(Step):
    """One weight w (starting at 0), step i's loss: Σ over (i + 1) items of (w + i); SGD with lr 0."""

    def __init__(self, valid=None, eval_s=0.0):
        self.model = torch.nn.Linear(1, 1, bias=False)
        with torch.no_grad():
            self.model.weight.zero_()
        self.valid, self.eval_s, self.evaluated = valid, eval_s, []

    def optimizer(self):
        return torch.optim.SGD(self.model.parameters(), lr=0.0)

    def batch(self, step, rt):
        return step, True

    def loss_sum(self, net, i):
        return (net.weight[0, 0] + i) * (i + 1), i + 1

    def evaluate(self, rt):
        self.evaluated.append(True)
        return dict(self.valid) if self.valid is not None else {}

    def eval_seconds(self, rt):
        return self.eval_s

    def model_config(self):
        return {"kind": "toy"}


def _clock(monkeypatch, tick=0.25):
    """The loop's and the budget's clock: ``tick`` seconds more at every reading."""
    from attnlab.train import runtime

    ticks = iter(range(1, 100_000))
    clock = types.SimpleNamespace(perf_counter=lambda: next(ticks) * tick)
    monkeypatch.setattr(fit_module, "time", clock)
    monkeypatch.setattr(runtime, "time", clock)


def test_the_loss_of_an_interval_is_its_sum_over_its_count(monkeypatch):
    """Step i (0-based) adds i·(i+1) over i+1 items: steps 0..2 → (0 + 2 + 6) / 6, steps 3, 4 → (12 + 20) / 9."""
    result = fit(Toy(), FitConfig(steps=5, log_every=3, clip=0.0))
    assert [r["step"] for r in result.history] == [3, 5]
    assert [r["loss"] for r in result.history] == pytest.approx([8 / 6, 32 / 9])
    assert result.train_loss == pytest.approx(32 / 9)
    assert all(set(r) == {"step", "loss", "tokens_per_s", "wall_s"} for r in result.history)


def test_the_lines_carry_the_runs_name_and_the_first_step_says_it_is_alive(monkeypatch):
    _clock(monkeypatch)
    said = []
    fit(Toy(), FitConfig(steps=4, log_every=2, clip=0.0, desc="exp"), log=said.append)
    # step 1 is no log step: the first-step line; its loss is the step's sum over its count (0 / 1)
    assert said == [
        "exp: step 1/4  loss 0.0000  (first step 0.2 s)",
        "exp: step 2  loss 0.6667",
        "exp: step 4  loss 2.5714",
    ]
    said.clear()
    fit(
        Toy(), FitConfig(steps=2, log_every=1, clip=0.0), log=said.append
    )  # step 1 logs: no extra line
    assert said == ["train: step 1  loss 0.0000", "train: step 2  loss 1.0000"]
    said.clear()
    fit(Toy(valid={"loss": 0.5}), FitConfig(steps=2, eval_every=2, clip=0.0), log=said.append)
    assert said[0] == "train: step 1/2  loss 0.0000  (first step 0.2 s)"


def test_records_take_the_wall_time_since_the_start_to_the_millisecond(monkeypatch):
    ticks = iter(range(1, 100_000))
    monkeypatch.setattr(
        fit_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) * 0.0011)
    )
    result = fit(Toy(), FitConfig(steps=2, log_every=1, clip=0.0))
    walls = [r["wall_s"] for r in result.history]
    assert all(w == round(w, 3) for w in walls) and walls[0] > 0 and walls == sorted(walls)
    # the first reading starts the run; each step reads the clock twice before its record
    assert walls[0] == pytest.approx(round(3 * 0.0011, 3))


def test_the_checkpoint_holds_the_model_entry_the_state_and_the_log(tmp_path, monkeypatch):
    _clock(monkeypatch)
    task = Toy(valid={"loss": 0.75})
    fit(
        task,
        FitConfig(steps=3, log_every=2, eval_every=3, save_every=3, clip=0.0),
        out=tmp_path / "r",
    )
    tensors, config, _ = load_checkpoint(tmp_path / "r")
    assert list(config)[2:] == ["model", "state"] and config["model"] == {"kind": "toy"}
    state = config["state"]
    assert list(state) == ["step", "valid", "loss_sum", "loss_n", "train_time"]
    assert state["step"] == 3 and state["valid"] == {"loss": 0.75}
    assert (state["loss_sum"], state["loss_n"]) == (
        0.0,
        0,
    )  # logged at the end: nothing left running
    assert state["train_time"] == pytest.approx(3 * 0.25)  # three steps of one tick each
    assert sorted(tensors) == ["model.weight", "rng.torch"]  # SGD without momentum keeps no state
    text = (tmp_path / "r" / "metrics.jsonl").read_text()
    # the default records are the train loss's only (step 3 alone: 2·3 over 3 items)
    assert [json.loads(line)["step"] for line in text.splitlines()] == [2, 3]
    assert runlog.read(tmp_path / "r")[-1]["loss"] == 2.0 and task.evaluated == [True]


def test_a_checkpoint_between_logs_keeps_the_running_sum(tmp_path):
    fit(
        Toy(),
        FitConfig(steps=5, log_every=4, save_every=3, clip=0.0),
        out=tmp_path / "r",
        stop_after=3,
    )
    state = json.loads((tmp_path / "r" / "config.json").read_text())["state"]
    assert (state["step"], state["loss_sum"], state["loss_n"]) == (
        3,
        8.0,
        6,
    )  # steps 0..2 of the toy


def _saved(tmp_path):
    fit(Toy(), FitConfig(steps=2, save_every=2, clip=0.0), out=tmp_path / "r")
    return tmp_path / "r"


@pytest.mark.parametrize(
    "field,value",
    [("loss_sum", float("nan")), ("loss_n", "3"), ("train_time", True), ("loss_sum", float("inf"))],
)
def test_resume_refuses_a_running_state_that_is_not_a_finite_number(tmp_path, field, value):
    out = _saved(tmp_path)
    cfg = json.loads((out / "config.json").read_text())
    cfg["state"][field] = value
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as e:
        fit(Toy(), FitConfig(steps=4, clip=0.0), out=out, resume=True)
    expected = {"loss_n": "an integer >= 0", "train_time": "a finite number >= 0"}.get(field, "a finite number")
    assert str(e.value) == f"{out}/config.json: state.{field} must be {expected}; got {value!r}"


def test_resume_refusals_of_a_missing_checkpoint_another_model_and_a_bad_step(tmp_path):
    with pytest.raises(CheckpointError) as e:
        fit(Toy(), FitConfig(steps=2), out=tmp_path / "none", resume=True)
    assert str(e.value) == f"--resume: no checkpoint to resume at {tmp_path / 'none'}"
    with pytest.raises(CheckpointError) as e:
        fit(Toy(), FitConfig(steps=2), resume=True)
    assert str(e.value) == "--resume: no checkpoint to resume at None"
    out = _saved(tmp_path)
    other = Toy()
    other.model_config = lambda: {"kind": "toy", "size": 2}
    with pytest.raises(CheckpointError) as e:
        fit(other, FitConfig(steps=4), out=out, resume=True)
    assert str(e.value) == (
        f"--resume: the checkpoint at {out} is of another model: size (none) recorded, 2 given; "
        "resume with the flags of the run it continues (or leave them out)"
    )
    cfg = json.loads((out / "config.json").read_text())
    for bad in ({"step": -1}, None):
        cfg["state"] = bad
        (out / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(ValueError) as e:
            fit(Toy(), FitConfig(steps=4), out=out, resume=True)
        what = "state.step must be an integer >= 1; got -1" if bad else "state must be an object; got null"
        assert str(e.value) == f"{out}/config.json: {what}"


def test_a_resumed_run_starts_from_the_saved_state_and_its_records(tmp_path):
    out = tmp_path / "r"
    fit(Toy(), FitConfig(steps=5, log_every=4, save_every=3, clip=0.0), out=out, stop_after=4)
    said = []
    result = fit(
        Toy(),
        FitConfig(steps=5, log_every=4, save_every=3, clip=0.0),
        out=out,
        resume=True,
        log=said.append,
    )
    # the records after the checkpoint's step 3 dropped (step 4's), then logged again with steps 3..4's sum
    assert [r["step"] for r in result.history] == [4, 5]
    assert [r["loss"] for r in result.history] == pytest.approx([(0 + 2 + 6 + 12) / 10, 20 / 5])
    assert (
        said[0] == "train: step 4  loss 2.0000"
    )  # the first step after a resume logs: no first-step line


def test_a_non_finite_validation_loss_stops_the_run_before_it_saves(tmp_path):
    with pytest.raises(
        NonFiniteError, match="^training stopped at step 2: the validation loss is nan"
    ):
        fit(
            Toy(valid={"loss": float("nan")}),
            FitConfig(steps=3, eval_every=2, save_every=1, clip=0.0),
            out=tmp_path / "r",
        )
    assert json.loads((tmp_path / "r" / "config.json").read_text())["state"]["step"] == 1
    fit(
        Toy(valid={"exact": float("nan")}), FitConfig(steps=1, clip=0.0)
    )  # no loss: nothing to check


def test_the_budget_counts_the_tasks_evaluation_estimate_and_stops_early(monkeypatch):
    """One tick (1 s) per clock reading. Before any evaluation is timed the task's estimate counts."""
    _clock(monkeypatch, tick=1.0)
    plain = fit(Toy(), FitConfig(steps=50, max_seconds=12.0, clip=0.0))
    slow = fit(Toy(eval_s=4.0), FitConfig(steps=50, max_seconds=12.0, clip=0.0))
    assert 1 <= slow.step < plain.step < 50
    assert plain.history[-1]["step"] == plain.step  # the end is logged at the step it stopped
    assert fit(Toy(eval_s=100.0), FitConfig(steps=50, max_seconds=12.0, clip=0.0)).step == 1
    assert (
        fit(Toy(eval_s=100.0), FitConfig(steps=3, clip=0.0)).step == 3
    )  # no budget: the estimate is unused


def test_stop_after_and_tensorboard_folder(tmp_path, monkeypatch):
    made = []

    class Writer:
        def __init__(self, log_dir):
            made.append(log_dir)

        def add_scalar(self, *a):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    import torch.utils.tensorboard as tb

    monkeypatch.setattr(tb, "SummaryWriter", Writer)
    r = fit(
        Toy(),
        FitConfig(steps=5, log_every=1, clip=0.0),
        out=tmp_path / "r",
        stop_after=2,
        tensorboard=True,
    )
    assert r.step == 2 and made == [str(tmp_path / "r" / "tensorboard")]
    made.clear()
    fit(Toy(), FitConfig(steps=1, clip=0.0), out=tmp_path / "s")  # without the flag: no writer
    assert made == []


def test_model_entry_is_the_registrys_config():
    from attnlab.models import build_model

    model = build_model({"kind": "cnn", "widths": [4, 8]})
    assert model_entry(model)["kind"] == "cnn" and model_entry(model)["widths"] == [4, 8]


def test_a_resume_keeps_the_record_of_the_checkpoints_own_step(tmp_path):
    out = tmp_path / "r"
    cfg = FitConfig(steps=6, log_every=3, save_every=3, clip=0.0)
    fit(Toy(), cfg, out=out, stop_after=5)
    saved = runlog.read(out)
    assert [r["step"] for r in saved] == [3]
    result = fit(Toy(), cfg, out=out, resume=True)
    assert [r["step"] for r in result.history] == [3, 6] and result.history[0] == saved[0]
    assert result.history[1]["loss"] == pytest.approx((12 + 20 + 30) / 15)  # steps 3..5 of the toy


class Offset(Toy):
    """Step i's loss: (w + i + 3) over one item."""

    def loss_sum(self, net, i):
        return net.weight[0, 0] + i + 3, 1


def test_the_first_step_line_shows_that_steps_loss_over_its_count(monkeypatch):
    _clock(monkeypatch)
    said = []
    fit(Offset(), FitConfig(steps=3, log_every=3, clip=0.0), log=said.append)
    assert said == [
        "train: step 1/3  loss 3.0000  (first step 0.2 s)",
        "train: step 3  loss 4.0000",
    ]


class _Tty:
    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_on_a_terminal_the_bar_shows_the_train_loss_and_validation_lines_go_above_it(monkeypatch):
    import sys

    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    said = []
    fit(
        Toy(valid={"loss": 0.5}),
        FitConfig(steps=2, log_every=1, eval_every=2, clip=0.0),
        progress=True,
        log=said.append,
    )
    assert said == []  # nothing through log: the train loss is on the bar, the rest above it
    assert "train: step 2  loss 1.0000" in tty.text and "train: step 1  loss" not in tty.text
    assert "2/2" in tty.text and "loss=1" in tty.text
    said.clear()
    tty.text = ""
    fit(Toy(), FitConfig(steps=2, log_every=1, clip=0.0), progress=False, log=said.append)
    assert said == ["train: step 1  loss 0.0000", "train: step 2  loss 1.0000"] and tty.text == ""


def test_the_tasks_estimate_of_an_evaluation_is_asked_once_with_the_runs_runtime(monkeypatch):
    from attnlab.train.runtime import Runtime

    _clock(monkeypatch, tick=1.0)
    asked = []

    class Asked(Toy):
        def eval_seconds(self, rt):
            asked.append(rt)
            return 0.0

    rt = Runtime()
    assert fit(Asked(), FitConfig(steps=3, max_seconds=100.0, clip=0.0), rt).step == 3
    assert asked == [rt]  # after the first step, before any evaluation is timed


def test_the_results_rate_counts_the_steps_after_the_last_logged_interval(monkeypatch):
    """Stopped after 3 of 10 steps (log every 10): no line was logged, the 1 + 2 + 3 items still count."""
    ticks = iter(range(1, 10_000))  # the loop's clock only: a quarter second per reading, two readings a step
    monkeypatch.setattr(fit_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) / 4))
    result = fit(Toy(), FitConfig(steps=10, log_every=10, clip=0.0), stop_after=3)
    assert result.step == 3 and result.history == []
    assert result.tokens_per_s == (1 + 2 + 3) / 0.75
