"""A training command writes into a folder that holds an attnlab checkpoint only when asked to:
``--resume`` continues it (a run of the same kind only), ``--overwrite`` replaces it. Otherwise it is
refused in one line that says what is there (the kind, the step, the date) and names both flags, and
the checkpoint keeps every byte."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import datetime

import pytest
import torch

from attnlab.cli import main
from attnlab.train.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "To be, or not to be, that is the question: whether tis nobler in the mind to suffer.\n" * 6
TINY = ["--batch-size", "2", "--block-size", "8", "--dim", "8", "--num-layers", "1", "--num-heads", "1",
        "--eval-batches", "1"]
VERBS = {"lm": ["train", "lm", *TINY], "seq2seq": ["train", "seq2seq", "--steps", "1"],
         "caption": ["train", "caption", "--epochs", "1"]}
# What each kind of run writes into config.json, as far as the refusal reads it.
CONFIGS = {"lm": {"kind": "char-lm", "model": {"kind": "gpt"}},
           "seq2seq": {"model": {"kind": "seq2seq"}, "data": {"name": "numbers-de-en"}},
           "caption": {"kind": "captioner", "model": {"kind": "captioner"}}}


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _saved(run) -> str:
    return datetime.fromtimestamp((run / "config.json").stat().st_mtime).strftime("%Y-%m-%d %H:%M")


def _checkpoint(run, kind: str, step: int = 7):
    save_checkpoint(run, {"w": torch.ones(2)}, {**CONFIGS[kind], "state": {"step": step}})
    return run


@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("there", sorted(CONFIGS))
def test_a_fresh_run_on_a_checkpoint_is_refused_saying_what_is_there(tmp_path, verb, there):
    run = _checkpoint(tmp_path / "run", there)
    before = _files(run)
    code, err = _run([*VERBS[verb], "--out", str(run)])
    assert code == 2
    assert err == (f"attnlab train {verb}: error: {run} already holds an attnlab `train {there}` run (step 7, saved "
                   f"{_saved(run)}); pass --resume to continue it or --overwrite to replace it, or choose another --out\n")
    assert _files(run) == before


@pytest.mark.parametrize("verb, there", [("lm", "seq2seq"), ("lm", "caption"), ("seq2seq", "lm"),
                                         ("seq2seq", "caption"), ("caption", "lm"), ("caption", "seq2seq")])
def test_a_resume_of_a_run_of_another_kind_is_refused_naming_both(tmp_path, verb, there):
    run = _checkpoint(tmp_path / "run", there)
    before = _files(run)
    code, err = _run([*VERBS[verb], "--out", str(run), "--resume"])
    assert code == 2
    assert err == (f"attnlab train {verb}: error: --resume: {run} holds an attnlab `train {there}` run (step 7, saved "
                   f"{_saved(run)}), not a `train {verb}` run: resume it with `attnlab train {there} --resume`, "
                   "or choose another --out\n")
    assert _files(run) == before


def test_resume_and_overwrite_together_are_refused(tmp_path):
    run = _checkpoint(tmp_path / "run", "lm")
    code, err = _run([*VERBS["lm"], "--out", str(run), "--resume", "--overwrite"])
    assert (code, err) == (2, f"attnlab train lm: error: --resume continues the run in {run} and --overwrite "
                              "replaces it: pass one of them\n")


def test_the_step_shown_is_the_run_logs_when_the_state_has_none(tmp_path):
    run = tmp_path / "run"
    records = "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in (10, 20))
    save_checkpoint(run, {"w": torch.ones(2)}, CONFIGS["caption"], {"metrics.jsonl": records})
    code, err = _run([*VERBS["lm"], "--out", str(run)])
    assert code == 2 and f"holds an attnlab `train caption` run (step 20, saved {_saved(run)});" in err


def test_overwrite_replaces_the_run_and_resume_continues_it(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TEXT, encoding="utf-8")
    run = tmp_path / "run"
    first = [*VERBS["lm"], "--text", str(text), "--out", str(run), "--steps", "2"]
    assert _run(first)[0] == 0
    (run / "notes.txt").write_text("mine")  # a file of the user's inside the run: carried along
    old = load_checkpoint(run)[0]["model.tok.weight"]

    assert _run([*first, "--seed", "5"])[0] == 2  # not asked: refused
    assert load_checkpoint(run)[0]["model.tok.weight"].equal(old)

    assert _run([*first, "--seed", "5", "--steps", "1", "--overwrite"])[0] == 0
    tensors, config, _ = load_checkpoint(run)
    assert config["state"]["step"] == 1 and config["train"]["seed"] == 5
    assert not tensors["model.tok.weight"].equal(old)
    assert (run / "notes.txt").read_text() == "mine"
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]

    assert _run([*VERBS["lm"], "--out", str(run), "--resume", "--steps", "2"])[0] == 0
    assert load_checkpoint(run)[1]["state"]["step"] == 2


def test_a_refused_run_leaves_no_lock_file_behind(tmp_path):
    run = _checkpoint(tmp_path / "run", "lm")
    (tmp_path / ".run.lock").unlink()  # as if the checkpoint was copied here
    assert _run([*VERBS["lm"], "--out", str(run)])[0] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
