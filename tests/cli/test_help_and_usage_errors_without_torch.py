"""Every verb's and task's ``--help``, and every usage error (a mistyped flag, verb or task, a missing
argument, a bad choice), answer without importing torch (nor NumPy): seconds of start-up saved. The
messages name the close spelling and point at the verb's own help. What a parser shows from modules
that import torch is read from their source (``attnlab.cli._static``); each such value is checked here
against the imported module. Bounds on the modules loaded, not timed tests."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import MISSING, fields

from cli_parsers import every_parser

from attnlab.cli import build_parser

# Each command line runs in one fresh interpreter, in turn; after each, the heavy modules loaded so far.
_PROBE = """
import contextlib, io, json, sys
from attnlab.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as e:
        code = e.code
    heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'matplotlib'})
    out.append([argv, code, heavy, err.getvalue()])
print(json.dumps(out))
"""


def _run(argvs: list[list[str]]) -> list[tuple[list[str], int, list[str], str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argvs)], capture_output=True, text=True,
                          check=True)
    return [tuple(r) for r in json.loads(done.stdout)]


def _commands() -> list[list[str]]:
    """Every verb and every task of a verb, as words: ["explain"], ["train", "seq2seq"], ..."""
    return [name.split()[1:] for name, _ in every_parser(build_parser()) if name != "attnlab"]


def test_every_verbs_and_tasks_help_imports_no_torch():
    commands = _commands()
    assert len(commands) >= 13 + 3 + 8  # the verbs, train's tasks, the experiments
    results = _run([[*c, "--help"] for c in commands])
    assert [(argv, code, heavy) for argv, code, heavy, _ in results] == [
        ([*c, "--help"], 0, []) for c in commands]


def test_every_commands_mistyped_flag_imports_no_torch_and_names_the_close_one():
    commands = [c for c in _commands() if c not in (["train"], ["experiment"])]
    results = _run([[*c, "--quiett"] for c in commands])
    parsers, quiet = {p.prog: p for _, p in every_parser(build_parser())}, 0
    for (argv, code, heavy, err), c in zip(results, commands):
        prog = " ".join(["attnlab", *c])
        has_quiet = any("--quiet" in a.option_strings for a in parsers[prog]._actions)
        assert (code, heavy) == (2, []), argv
        assert err.startswith(f"{prog}: error: "), argv  # this, or a required argument missing first
        assert err.endswith(f"see {prog} --help)\n") and len(err.splitlines()) == 1, argv
        if has_quiet and "unrecognized arguments: --quiett (" in err:
            assert "(did you mean --quiet? see " in err, argv
            quiet += 1
    assert quiet >= 8


def test_usage_errors_import_no_torch_and_point_at_the_verbs_help():
    results = _run([["explian"], ["train", "sek2seq"], ["train", "lm", "--positional", "rpoe", "--out", "x"],
                    ["translate"], ["view", "--example"], ["explain", "--exampel", "x"],
                    ["train", "seq2seq", "--stepz", "3", "--out", "x"]])
    assert [(code, heavy) for _, code, heavy, _ in results] == [(2, [])] * 7
    lines = [err for *_, err in results]
    assert lines[0].startswith("attnlab: error: argument VERB: invalid choice: 'explian' (choose from ")
    assert lines[0].endswith(" (did you mean explain? see attnlab --help)\n")
    assert lines[1].startswith("attnlab train: error: argument TASK: invalid choice: 'sek2seq' (choose from ")
    assert lines[1].endswith(" (did you mean seq2seq? see attnlab train --help)\n")
    assert lines[2].startswith("attnlab train lm: error: argument --positional: invalid choice: 'rpoe' (choose ")
    assert lines[2].endswith(" (did you mean rope? see attnlab train lm --help)\n")
    assert lines[3] == ("attnlab translate: error: one of the arguments --checkpoint --pretrained is required "
                        "(see attnlab translate --help)\n")
    assert lines[4] == "attnlab view: error: argument --example: expected one argument (see attnlab view --help)\n"
    assert lines[5] == ("attnlab explain: error: unrecognized arguments: --exampel (did you mean --example? "
                        "see attnlab explain --help)\n")
    assert lines[6] == ("attnlab train seq2seq: error: unrecognized arguments: --stepz 3 (did you mean --steps? "
                        "see attnlab train seq2seq --help)\n")


def test_what_the_parsers_read_from_the_source_is_what_the_modules_hold():
    from attnlab.cli import _static

    build_parser()  # every verb: every value read
    assert len(_static.READ) >= 12
    for kind, module, name in sorted(_static.READ):
        real = getattr(importlib.import_module(f"attnlab.{module}"), name)
        if kind == "constant":
            static = _static.constant(module, name)
            keys_only = isinstance(real, dict) and not isinstance(static, dict)  # a dict of code: its keys
            assert static == (tuple(real) if keys_only else real), f"attnlab.{module}.{name}"
        else:
            read = _static.defaults(module, name).fields
            assert list(read) == [f.name for f in fields(real)], f"attnlab.{module}.{name}"
            for f in fields(real):
                if read[f.name] is not MISSING:
                    assert read[f.name] == f.default, f"attnlab.{module}.{name}.{f.name}"


def test_the_positions_the_translator_parser_offers_are_the_translators():
    from attnlab.models.transformer import POSITIONAL

    parser = build_parser(only="train")
    seq2seq = next(p for name, p in every_parser(parser) if name == "attnlab train seq2seq")
    assert tuple(seq2seq._option_string_actions["--positional"].choices) == POSITIONAL


def test_a_value_that_is_not_written_literally_is_refused_by_name(tmp_path, monkeypatch):
    from attnlab.cli import _static

    (tmp_path / "m.py").write_text("import os\nX = os.sep\nY = {'a': len, 'b': print}\n", encoding="utf-8")
    monkeypatch.setattr(_static, "PACKAGE", tmp_path)
    _static._top.cache_clear()
    try:
        assert _static.constant("m", "Y") == ("a", "b")
        try:
            _static.constant("m", "X")
        except ValueError as e:
            assert str(e) == "not a literal, a dict of literal keys or a collection of named calls: os.sep"
        else:
            raise AssertionError("os.sep was read as a literal")
    finally:
        _static._top.cache_clear()
