"""How ``attnlab`` ends (``attnlab.cli.main``): each kind of error is one exact line on stderr with its
exit code (2: the user's to fix; 70: a bug of ours; 130: Ctrl-C; 0: a closed pipe), an optional package
that is missing names the extra that installs it, a bad command line is one line pointing at ``--help``,
and ``python -m attnlab.cli`` is the same command."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import attnlab
from attnlab import cli
from attnlab.cli import (
    EXTRAS,
    USER_ERRORS,
    Parser,
    UsageError,
    _missing_extra,
    _one_line,
    _verb,
    main,
)


def test_one_line_of_each_kind_of_error():
    assert _one_line(ValueError("bad  value\n  on two lines")) == "bad value on two lines"
    assert _one_line(ValueError()) == "ValueError"  # no message: its kind
    assert _one_line(UsageError("   ")) == "UsageError"
    assert _one_line(RecursionError("maximum recursion depth exceeded")) == (
        "the input is nested too deeply to read (a file of thousands of nested lists or tables?)"
    )
    assert _one_line(MemoryError()) == "not enough memory for this input; try smaller sizes"
    assert _one_line(FileNotFoundError(2, "No such file or directory", "runs/x.toml")) == (
        "No such file or directory: runs/x.toml"
    )
    # an OSError without a file name, or without a reason, is its message on one line
    assert _one_line(OSError(28, "No space left on device")) == "[Errno 28] No space left on device"
    assert _one_line(OSError("disk\nfull")) == "disk full"


def test_a_long_message_is_cut_at_500_characters():
    assert _one_line(ValueError("a" * 500)) == "a" * 500
    assert _one_line(ValueError("a" * 501)) == "a" * 497 + "..."
    assert len(_one_line(ValueError("b " * 1000))) == 500


def test_a_missing_optional_package_names_its_extra():
    written = {
        "matplotlib": "viz", "sacrebleu": "lab", "num2words": "lab", "emoji": "vision",
        "transformers": "hf", "onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx", "mkdocs": "docs",
        "tensorboard": "tensorboard",
    }  # fmt: skip
    assert EXTRAS == written
    for package, extra in written.items():
        hint = _missing_extra(ModuleNotFoundError(name=f"{package}.sub.module"))
        assert hint == f"this needs the optional package {package}: pip install 'attnlab[{extra}]'"
    assert _missing_extra(ModuleNotFoundError(name="nosuchpackage")) is None
    assert _missing_extra(ModuleNotFoundError("no name")) is None


def test_the_user_errors_are_these_five():
    assert USER_ERRORS == (UsageError, ValueError, OSError, RecursionError, MemoryError)


def test_a_bad_command_line_is_one_line_pointing_at_help(capsys):
    p = Parser(prog="attnlab demo")
    p.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--n", "x"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "attnlab demo: error: argument --n: invalid int value: 'x' (see attnlab demo --help)\n"
    )
    with pytest.raises(SystemExit):
        p.error("a message\n   on  two lines")
    assert (
        capsys.readouterr().err
        == "attnlab demo: error: a message on two lines (see attnlab demo --help)\n"
    )


def test_the_verb_is_the_first_word_when_it_is_one():
    assert _verb(["train", "lm"]) == "train"
    assert _verb(["plot-run", "x"]) == "plot-run"
    assert _verb(["--version"]) == ""
    assert _verb(["trian"]) == ""
    assert _verb([]) == ""


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"attnlab {attnlab.__version__}\n"


def test_a_mistyped_verb_is_refused_with_the_verbs(capsys):
    with pytest.raises(SystemExit) as e:
        main(["trian"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("attnlab: error: argument VERB: invalid choice: 'trian' (choose from ")
    assert err.endswith(" (did you mean train? see attnlab --help)\n") and "'train'" in err and "'plot-run'" in err


def run_with(monkeypatch, capsys, argv, func):
    """``main(argv)`` with the verb's function replaced by ``func``: (exit code, stdout, stderr)."""
    real = cli.build_parser

    def build(only=None):
        parser = target = real(only)
        for word in argv[:2]:  # the verb's parser, or its task's
            sub = [a for a in target._actions if isinstance(a, argparse._SubParsersAction)]
            if not sub or word not in sub[0].choices:
                break
            target = sub[0].choices[word]
        target.set_defaults(func=func)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def raising(error):
    def func(args):
        raise error

    return func


@pytest.mark.parametrize(
    "error, line",
    [
        (UsageError("give  --text"), "give --text"),
        (ValueError("--dim must be >= 1; got 0"), "--dim must be >= 1; got 0"),
        (FileNotFoundError(2, "No such file or directory", "a.json"), "No such file or directory: a.json"),
        (RecursionError(), "the input is nested too deeply to read (a file of thousands of nested lists or tables?)"),
        (MemoryError(), "not enough memory for this input; try smaller sizes"),
        (ModuleNotFoundError(name="matplotlib.pyplot"), "this needs the optional package matplotlib: pip install 'attnlab[viz]'"),
    ],
)  # fmt: skip
def test_a_users_error_is_one_line_and_exit_2(monkeypatch, capsys, error, line):
    code, out, err = run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], raising(error))
    assert (code, out, err) == (2, "", f"attnlab plot-run: error: {line}\n")


def test_the_error_line_names_the_verb_and_its_task(monkeypatch, capsys, tmp_path):
    argv = ["train", "lm", "--out", str(tmp_path / "o")]
    code, _, err = run_with(monkeypatch, capsys, argv, raising(UsageError("no text")))
    assert (code, err) == (2, "attnlab train lm: error: no text\n")


def test_ctrl_c_is_exit_130(monkeypatch, capsys):
    code, out, err = run_with(
        monkeypatch, capsys, ["plot-run", "m.jsonl"], raising(KeyboardInterrupt())
    )
    assert (code, out, err) == (130, "", "attnlab plot-run: interrupted\n")


def test_a_bug_of_ours_is_one_line_and_exit_70(monkeypatch, capsys):
    monkeypatch.delenv("ATTNLAB_DEBUG", raising=False)
    code, out, err = run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], raising(KeyError("x")))
    assert (code, out) == (70, "")
    assert err == (
        "attnlab plot-run: internal error (KeyError: 'x'); "
        "rerun with ATTNLAB_DEBUG=1 for the traceback and please report it\n"
    )


def test_attnlab_debug_shows_the_traceback_of_a_bug(monkeypatch, capsys):
    monkeypatch.setenv("ATTNLAB_DEBUG", "1")
    with pytest.raises(KeyError):
        run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], raising(KeyError("x")))


def test_a_missing_module_that_is_no_optional_package_is_a_bug_not_a_hint(monkeypatch, capsys):
    with pytest.raises(ModuleNotFoundError):
        run_with(
            monkeypatch,
            capsys,
            ["plot-run", "m.jsonl"],
            raising(ModuleNotFoundError(name="nosuchpackage")),
        )


def test_the_verbs_return_value_is_the_exit_code(monkeypatch, capsys):
    assert run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], lambda args: None)[0] == 0
    assert run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], lambda args: 1)[0] == 1
    assert run_with(monkeypatch, capsys, ["plot-run", "m.jsonl"], lambda args: True)[0] == 1


def test_a_closed_pipe_ends_with_exit_0(monkeypatch, capsys, tmp_path):
    with open(
        tmp_path / "out", "w"
    ) as stdout:  # a file of its own: main points its descriptor at devnull
        monkeypatch.setattr(sys, "stdout", stdout)
        code, _, err = run_with(
            monkeypatch, capsys, ["plot-run", "m.jsonl"], raising(BrokenPipeError())
        )
    assert (code, err) == (0, "")


def test_threads_are_set_before_the_verb_runs(monkeypatch, capsys):
    import torch

    before = torch.get_num_threads()
    seen = []
    try:
        argv = ["explain", "dot", "--threads", "2"]
        code, _, _ = run_with(
            monkeypatch, capsys, argv, lambda args: seen.append(torch.get_num_threads())
        )
    finally:
        torch.set_num_threads(before)
    assert (code, seen) == (0, [2])


def test_threads_out_of_range_is_one_line(monkeypatch, capsys):
    code, _, err = run_with(
        monkeypatch, capsys, ["explain", "dot", "--threads", "0"], lambda args: 0
    )
    assert (code, err) == (2, "attnlab explain: error: --threads must be >= 1; got 0\n")
    code, _, err = run_with(
        monkeypatch, capsys, ["explain", "dot", "--threads", "1025"], lambda args: 0
    )
    assert (code, err) == (2, "attnlab explain: error: --threads must be <= 1024; got 1025\n")


def test_an_unknown_recipe_is_one_line_and_exit_2(capsys):
    assert main(["train", "--recipe", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("attnlab train: error: ") and "no-such-model" in err and err.count("\n") == 1
    )


def test_python_dash_m_attnlab_cli_is_the_command():
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "--version"], capture_output=True, text=True
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        f"attnlab {attnlab.__version__}\n",
        "",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.startswith(
        "attnlab: error: argument VERB: invalid choice: 'nope'"
    )


def test_bare_attnlab_lists_the_verbs_and_a_mistyped_flag_names_the_close_one(capsys):
    from attnlab.cli import VERBS, main

    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: attnlab") and all(verb in out for verb in VERBS)
    with pytest.raises(SystemExit) as e:
        main(["explain", "--exampel", "x"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("attnlab explain: error: unrecognized arguments: --exampel (did you mean "
                                       "--example? see attnlab explain --help)\n")
    with pytest.raises(SystemExit):
        main(["explain", "--zzz"])
    assert capsys.readouterr().err == "attnlab explain: error: unrecognized arguments: --zzz (see attnlab explain --help)\n"
