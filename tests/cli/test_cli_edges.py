"""Every verb of the command line, driven with missing, malformed, empty, binary, huge and adversarial
input: each ends with exit status 2 and exactly one line on stderr, never a traceback.

The verbs are enumerated from the parser, so a verb added later is covered by the generic cases
(an unknown flag, a non-number for every numeric option) without editing this file."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from attnlab.cli import build_parser, main


def _verbs(parser: argparse.ArgumentParser, prefix=()) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = _verbs(sub, (*prefix, name))
                out += inner or [((*prefix, name), sub)]
    return out


VERBS = _verbs(build_parser())
NUMERIC = [(v, a.option_strings[-1]) for v, p in VERBS for a in p._actions
           if a.option_strings and a.type in (int, float) or (a.option_strings and getattr(a.type, "__name__", "") in ("positive_int", "fraction"))]


def _fails_cleanly(capsys, argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, f"{argv}: exit {code}, stderr {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{argv}: {len(lines)} lines on stderr: {err!r}"
    assert "Traceback" not in err
    return lines[0]


def test_every_verb_is_found():
    names = {" ".join(v) for v, _ in VERBS}
    assert {"explain", "verify", "view", "train seq2seq", "train lm", "experiment vision", "translate"} <= names


@pytest.mark.parametrize("verb", [v for v, _ in VERBS], ids=[" ".join(v) for v, _ in VERBS])
def test_unknown_flag(capsys, verb):
    line = _fails_cleanly(capsys, [*verb, "--no-such-flag"])
    assert "--no-such-flag" in line or "required" in line


@pytest.mark.parametrize("verb, flag", NUMERIC, ids=[f"{' '.join(v)} {f}" for v, f in NUMERIC])
def test_not_a_number(capsys, verb, flag):
    line = _fails_cleanly(capsys, [*verb, flag, "twelve"])
    assert flag in line and "twelve" in line


# -- files ---------------------------------------------------------------------------------------


@pytest.fixture
def bad_files(tmp_path):
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("x = " + "[" * 10_000 + "]" * 10_000 + "\n")
    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    binary = tmp_path / "binary.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    return {"missing": str(tmp_path / "missing.toml"), "folder": str(folder), "binary": str(binary),
            "empty": str(empty), "deep_toml": str(deep_toml), "deep_json": str(deep_json)}


@pytest.mark.parametrize("kind", ["missing", "folder", "binary", "empty", "deep_toml"])
def test_explain_and_verify_files(capsys, bad_files, kind):
    _fails_cleanly(capsys, ["explain", "--file", bad_files[kind]])
    _fails_cleanly(capsys, ["verify", bad_files[kind]])


@pytest.mark.parametrize("kind", ["missing", "folder", "binary", "empty", "deep_json"])
def test_view_json_files(capsys, bad_files, kind, tmp_path):
    _fails_cleanly(capsys, ["view", "--json", bad_files[kind], "-o", str(tmp_path / "v.html")])


@pytest.mark.parametrize(
    "payload, words",
    [
        ({"tokens": ["a", "b"], "layers": [[[[0.5, float("nan")], [0.5, 0.5]]]]}, "NaN"),
        ({"tokens": ["a", "b"], "layers": [[[[-0.5, 1.5], [0.5, 0.5]]]]}, "negative"),
        ({"tokens": ["a", "b"], "layers": [[[["x", "y"], [0.5, 0.5]]]]}, "numbers"),
        ({"tokens": [1, 2], "layers": [[[[0.5, 0.5], [0.5, 0.5]]]]}, "tokens[0] is 1"),
        ({"tokens": ["a", "b", "c"], "layers": [[[[0.5, 0.5], [0.5, 0.5]]]]}, "3 labels"),
    ],
)
def test_view_json_values(capsys, tmp_path, payload, words):
    f = tmp_path / "w.json"
    f.write_text(json.dumps(payload).replace("NaN", "NaN"))
    line = _fails_cleanly(capsys, ["view", "--json", str(f), "-o", str(tmp_path / "v.html")])
    assert words in line


def test_view_output_is_a_folder(capsys, tmp_path):
    (tmp_path / "x.html").mkdir()
    _fails_cleanly(capsys, ["view", "--example", "tutorial1-additive", "-o", str(tmp_path / "x.html")])


@pytest.mark.parametrize("verb", [["translate", "hallo"], ["evaluate"], ["generate"], ["caption", "img.png"]])
@pytest.mark.parametrize("kind", ["missing", "folder", "binary"])
def test_checkpoints_that_are_not(capsys, bad_files, verb, kind):
    _fails_cleanly(capsys, [verb[0], "--checkpoint", bad_files[kind], *verb[1:]])


@pytest.mark.parametrize("kind", ["missing", "folder", "binary", "empty"])
def test_train_lm_text(capsys, bad_files, kind, tmp_path):
    _fails_cleanly(capsys, ["train", "lm", "--text", bad_files[kind], "--steps", "1", "--out", str(tmp_path / "run")])


def test_training_never_overwrites_what_is_not_a_checkpoint(capsys, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("precious")
    for out in (mine, a_file):
        _fails_cleanly(capsys, ["train", "lm", "--steps", "1", "--out", str(out)])
        _fails_cleanly(capsys, ["train", "caption", "--epochs", "1", "--out", str(out)])
        _fails_cleanly(capsys, ["train", "seq2seq", "--steps", "1", "--out", str(out)])
    assert (mine / "thesis.tex").read_text() == "precious" and a_file.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "notes.txt"]


@pytest.mark.parametrize("argv", [["train", "lm", "--plays", "-1"], ["train", "lm", "--max-seconds", "-1"],
                                  ["train", "lm", "--steps", "0"], ["train", "lm", "--dropout", "1.5"],
                                  ["experiment", "vision", "--widths", "0,8"], ["experiment", "distance", "--seeds", "0"],
                                  ["train", "seq2seq", "--n", "3", "--steps", "1"], ["train", "seq2seq", "--n", "0"]])
def test_impossible_numbers(capsys, argv, tmp_path):
    _fails_cleanly(capsys, [*argv, "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_a_closed_pipe_ends_quietly():
    code = ("import sys; sys.argv=['attnlab','explain','--list']; from attnlab.cli import main; "
            "sys.exit(main())")
    proc = subprocess.run(f"{sys.executable} -c \"{code}\" | head -c 10", shell=True, capture_output=True, text=True)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_subprocess_error_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "attnlab", "explain", "--file", str(tmp_path / "none.toml")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
