"""A run cannot be poisoned from the command line or from its checkpoint: a NaN, infinite, absurd or
wrongly typed setting is one line (exit 2) naming it, and a checkpoint is never overwritten by a bad
resume or a diverged model; its bytes stay as they were."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlab.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "To be, or not to be, that is the question: whether tis nobler in the mind to suffer.\n" * 6
TINY = ["--steps", "2", "--batch-size", "2", "--block-size", "8", "--dim", "8", "--num-layers", "1", "--num-heads", "1",
        "--eval-batches", "1"]


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse
            code = e.code
    return code, err.getvalue()


def _fails_cleanly(argv: list[str]) -> str:
    code, err = _run(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err and "internal error" not in err, (argv, code, err)
    return lines[0]


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny language-model checkpoint, the smallest the command line allows, and its text."""
    root = tmp_path_factory.mktemp("lm")
    text = root / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    out = root / "run"
    code, err = _run(["train", "lm", "--text", str(text), "--out", str(out), *TINY])
    assert code == 0, err
    return out, text


@pytest.fixture
def run_copy(lm_run, tmp_path):
    out, text = lm_run
    shutil.copytree(out, tmp_path / "run")
    return tmp_path / "run", text


@pytest.mark.parametrize("flags, words", [
    (["--weight-decay", "nan"], "weight_decay must be a finite number in [0, 10]; got nan"),
    (["--lr", "inf"], "lr must be a finite number in (0, 100]; got inf"),
    (["--lr", "1e400"], "lr must be a finite number in (0, 100]; got inf"),
    (["--lr=-1e-3"], "lr must be > 0; got -0.001"),
    (["--dropout", "nan"], "dropout must be a finite number"),
    (["--max-seconds", "inf"], "max_seconds must be a finite number"),
    (["--batch-size", "100000000000"], "batch_size must be <= 1048576; got 100000000000"),
    (["--num-layers", "100000"], "num_layers must be <= 1024; got 100000"),
    (["--lr", "100", "--weight-decay", "10", "--steps", "40", "--eval-every", "0"],
     "the gradients became non-finite"),  # in range, but it diverges: stopped before it saves
])
def test_a_bad_resume_leaves_the_checkpoint_byte_for_byte(run_copy, flags, words):
    out, text = run_copy
    before = _files(out)
    line = _fails_cleanly(["train", "lm", "--text", str(text), "--out", str(out), "--resume", *flags])
    assert words in line
    assert _files(out) == before
    assert _run(["generate", "--checkpoint", str(out), "--tokens", "3"])[0] == 0


def test_a_bad_resume_in_a_process_of_its_own_is_one_line(run_copy):
    out, text = run_copy
    before = _files(out)
    proc = subprocess.run([sys.executable, "-m", "attnlab", "train", "lm", "--text", str(text), "--out", str(out),
                           "--resume", "--weight-decay", "nan"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert _files(out) == before


def test_on_nonfinite_is_a_setting_of_the_run(run_copy):
    out, text = run_copy
    assert _run(["train", "lm", "--text", str(text), "--out", str(out), "--resume", "--steps", "3",
                 "--on-nonfinite", "skip"])[0] == 0
    assert json.loads((out / "config.json").read_text())["train"]["on_nonfinite"] == "skip"
    assert "invalid choice" in _fails_cleanly(["train", "lm", "--out", str(out), "--on-nonfinite", "maybe"])


def _edit(out, path: str, value) -> None:
    cfg = json.loads((out / "config.json").read_text())
    *parents, last = path.split(".")
    node = cfg
    for key in parents:
        node = node[key]
    node[last] = value
    (out / "config.json").write_text(json.dumps(cfg))  # NaN and Infinity as Python writes them


@pytest.mark.parametrize("path, value, words", [
    ("state.step", -3, "state.step must be an integer >= 1; got -3"),
    ("state.step", 1.5, "state.step must be an integer >= 1; got 1.5"),
    ("state.loss_ema", "low", "state.loss_ema must be a finite number"),
    ("train.lr", None, "train.lr must be a number in (0, 100], not null; got null"),
    ("train.weight_decay", float("nan"), "train.weight_decay must be a finite number"),
    ("train.batch_size", "2", "train.batch_size must be an integer"),
    ("train", [1, 2], "'train' must be an object"),
])
def test_a_bad_checkpoint_field_stops_a_resume_in_one_line(run_copy, path, value, words):
    out, text = run_copy
    _edit(out, path, value)
    before = _files(out)
    assert words in _fails_cleanly(["train", "lm", "--text", str(text), "--out", str(out), "--resume", "--steps", "3"])
    assert _files(out) == before


@pytest.mark.parametrize("path, value, words", [
    ("model.dim", None, "model.dim must be an integer in [1, 65536], not null; got null"),
    ("model.dim", 8.0, "model.dim must be an integer"),
    ("model.dropout", float("inf"), "model.dropout must be a finite number"),
    ("model.num_layers", 10**9, "model.num_layers must be <= 1024"),  # it used to build forever
    ("model.positional", 3, "model.positional must be a string"),
    ("model.vocab_size", True, "model.vocab_size must be an integer"),
])
def test_a_bad_model_config_is_one_line_before_anything_is_built(run_copy, path, value, words):
    out, _ = run_copy
    _edit(out, path, value)
    assert words in _fails_cleanly(["generate", "--checkpoint", str(out), "--tokens", "2"])


def test_a_model_too_big_for_memory_is_counted_not_allocated(run_copy):
    out, _ = run_copy
    cfg = json.loads((out / "config.json").read_text())
    cfg["model"].update(dim=2**16, num_layers=1024, num_heads=4096, block_size=2**20)
    (out / "config.json").write_text(json.dumps(cfg))
    assert "parameters" in _fails_cleanly(["generate", "--checkpoint", str(out), "--tokens", "2"])


def test_nan_weights_in_a_checkpoint_are_one_line(run_copy):
    from safetensors.torch import load_file, save_file

    out, _ = run_copy
    tensors = load_file(str(out / "model.safetensors"))
    tensors["model.tok.weight"] = torch.full_like(tensors["model.tok.weight"], float("nan"))
    save_file(tensors, str(out / "model.safetensors"))
    assert "NaN or infinite weights" in _fails_cleanly(["generate", "--checkpoint", str(out), "--tokens", "2"])


@pytest.mark.parametrize("flags, words", [
    (["--temperature", "nan"], "--temperature must be a finite number in [0, 100]; got nan"),
    (["--temperature", "inf"], "--temperature must be a finite number"),
    (["--temperature=-1"], "--temperature must be >= 0; got -1.0"),
    (["--top-k", "0"], "--top-k must be >= 1; got 0"),
    (["--tokens=-1"], "--tokens must be >= 0; got -1"),
    (["--tokens", "10000000000"], "--tokens must be <= 100000"),
    (["--seed=-1"], "--seed must be >= 0; got -1"),
])
def test_generate_flags(lm_run, flags, words):
    assert words in _fails_cleanly(["generate", "--checkpoint", str(lm_run[0]), *flags])


@pytest.mark.parametrize("temperature", ["0", "1e-300", "100"])
def test_generate_at_the_ends_of_the_temperature_range(lm_run, temperature):
    code, err = _run(["generate", "--checkpoint", str(lm_run[0]), "--tokens", "4", "--temperature", temperature])
    assert code == 0, err


@pytest.mark.parametrize("argv, words", [
    (["train", "seq2seq", "--lr", "inf"], "lr must be a finite number"),
    (["train", "seq2seq", "--hidden", "100000000000"], "hidden must be <= 65536"),
    (["train", "seq2seq", "--model", "transformer", "--dim", "100000000000"], "dim must be <= 65536"),
    (["train", "seq2seq", "--model", "transformer", "--dim", "65536", "--ff", "262144", "--num-layers", "1024",
      "--num-heads", "4096"], "parameters"),
    (["train", "caption", "--lr", "inf"], "lr must be a finite number"),
    (["train", "caption", "--image-size", "100000000000"], "image_size must be <= 8192"),
    (["train", "caption", "--dim", "100000000000"], "--dim must be <= 65536"),
    (["train", "lm", "--dim", "100000000000"], "dim must be <= 65536"),
    (["train", "lm", "--threads", "100000"], "--threads must be <= 1024"),
])
def test_train_flags(tmp_path, argv, words):
    assert words in _fails_cleanly([*argv, "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


# -- fuzz: every numeric flag of the training and sampling verbs, every field of a checkpoint -------

def _numeric_flags() -> list[tuple[tuple[str, ...], str, type]]:
    parser = build_parser()
    out = []
    for verb in (("train", "lm"), ("train", "seq2seq"), ("train", "caption"), ("generate",)):
        sub = parser
        for name in verb:
            sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        for a in sub._actions:
            kind = {int: int, float: float}.get(a.type, int if getattr(a.type, "__name__", "") == "positive_int" else None)
            if a.option_strings and kind is not None and a.help is not argparse.SUPPRESS:  # not an old spelling
                out.append((verb, a.option_strings[-1], kind))
    return out


FLAGS = _numeric_flags()
BAD_FLOATS = st.sampled_from(["nan", "inf", "-inf", "1e400", "-1e400", "NaN", "-1e30", "1e30"])
BAD_INTS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63, max_value=2**80)).map(str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_numeric_flag_takes_an_absurd_value(lm_run, tmp_path, data):
    verb, flag, kind = data.draw(st.sampled_from(FLAGS))
    value = data.draw(BAD_FLOATS if kind is float else BAD_INTS)
    where = ["--checkpoint", str(lm_run[0])] if verb == ("generate",) else ["--out", str(tmp_path / "fuzz")]
    line = _fails_cleanly([*verb, *where, f"{flag}={value}"])
    assert flag.lstrip("-").replace("-", "_") in line.replace("-", "_") or flag in line, line
    assert not (tmp_path / "fuzz").exists()


FIELDS = ["model.dim", "model.num_layers", "model.num_heads", "model.block_size", "model.dropout", "model.vocab_size",
          "model.num_kv_heads", "train.lr", "train.weight_decay", "train.batch_size", "train.steps", "train.warmup",
          "train.seed", "train.val_fraction", "train.max_seconds", "state.step", "state.train_time", "state.loss_ema"]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4), st.lists(st.integers(0, 9), max_size=2))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(FIELDS), value=VALUES)
def test_no_checkpoint_field_crashes_a_reader_or_poisons_a_resume(lm_run, tmp_path_factory, path, value):
    src, text = lm_run
    out = tmp_path_factory.mktemp("fuzz") / "run"
    shutil.copytree(src, out)
    _edit(out, path, value)
    for argv in (["generate", "--checkpoint", str(out), "--tokens", "2"],
                 ["train", "lm", "--text", str(text), "--out", str(out), "--resume", "--steps", "3"]):
        code, err = _run(argv)
        assert code in (0, 2) and "internal error" not in err and "Traceback" not in err, (path, value, argv, err)
        assert code == 0 or len(err.strip().splitlines()) == 1, err
    from safetensors.torch import load_file

    weights = load_file(str(out / "model.safetensors"))
    assert all(math.isfinite(v) for t in weights.values() if t.is_floating_point() for v in t.flatten().tolist())


def test_an_allocation_that_fails_mid_run_is_one_line(monkeypatch, tmp_path):
    from attnlab.train import lm

    def no_memory(*a, **k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 68719476736 bytes")

    monkeypatch.setattr(lm, "train_lm", no_memory)
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    assert "not enough memory" in _fails_cleanly(["train", "lm", "--text", str(text), "--out", str(tmp_path / "o")])
