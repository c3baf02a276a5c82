"""``attnlab check``, run in this process: each flag reaches ``attnlab.testing.check`` as the documented value
(defaults: signature qkv_mask, float32, cpu, gradients on, seed 0, causal top_left, no generated examples), the
report is printed, ``--reproducers`` prints each failure's reproducer, the exit code is 0 / 1, and every bad
target is refused with its own one-line message (exit 2)."""

from __future__ import annotations

import types

import pytest
import torch

import attnlab.testing
from attnlab.cli import main
from attnlab.cli.check import load_function

GOOD = "def attention(q, k, v, mask):\n    return q\n\nNOT_CALLABLE = 3\n"


class _Report:
    def __init__(self, ok, failures=()):
        self.ok, self.failures = ok, list(failures)

    def __str__(self):
        return "REPORT-TEXT"


class _Failure:
    def __init__(self, case, code):
        self.case, self._code = case, code

    def reproducer(self):
        return self._code


@pytest.fixture
def recorded(monkeypatch):
    calls = []
    report = {"value": _Report(True)}

    def fake_check(fn, **kwargs):
        calls.append((fn, kwargs))
        return report["value"]

    monkeypatch.setattr(attnlab.testing, "check", fake_check)
    return calls, report


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "myattn_for_check.py"
    path.write_text(GOOD)
    return f"{path}:attention"


def test_the_defaults_reach_the_contract(recorded, target, capsys):
    calls, _ = recorded
    assert main(["check", target]) == 0
    ((fn, kwargs),) = calls
    assert fn.__name__ == "attention"
    assert kwargs == {
        "signature": "qkv_mask",
        "dtypes": [torch.float32],
        "devices": ["cpu"],
        "grad": True,
        "seed": 0,
        "causal": "top_left",
        "examples": 0,
        "timeout": 120.0,
    }
    assert capsys.readouterr().out == "REPORT-TEXT\n"


def test_every_flag_reaches_the_contract(recorded, target, capsys):
    calls, _ = recorded
    argv = [
        "check",
        target,
        "--signature",
        "qkv_bias",
        "--precision",
        "fp64",
        "--precision",
        "bfloat16",
        "--device",
        "cpu",
        "--device",
        "meta",
        "--no-grad",
        "--seed",
        "7",
        "--causal",
        "bottom_right",
        "--examples",
        "5",
        "--timeout",
        "2.5",
    ]
    assert main(argv) == 0
    ((_, kwargs),) = calls
    assert kwargs == {
        "signature": "qkv_bias",
        "dtypes": [torch.float64, torch.bfloat16],
        "devices": ["cpu", "meta"],
        "grad": False,
        "seed": 7,
        "causal": "bottom_right",
        "examples": 5,
        "timeout": 2.5,
    }


@pytest.mark.parametrize("precision, dtype", [("fp32", "float32"), ("fp64", "float64"), ("fp16", "float16"),
                                              ("bf16", "bfloat16"), ("float32", "float32"), ("bfloat16", "bfloat16")])
def test_each_precision_name_is_the_torch_dtype(recorded, target, precision, dtype):
    calls, _ = recorded
    assert main(["check", target, "--precision", precision]) == 0
    assert calls[0][1]["dtypes"] == [getattr(torch, dtype)]


def test_dtype_is_the_old_spelling_of_precision(recorded, target, capsys):
    calls, _ = recorded
    assert main(["check", target, "--dtype", "float16"]) == 0
    assert calls[0][1]["dtypes"] == [torch.float16]
    assert capsys.readouterr().err.startswith("attnlab check: note: --dtype is deprecated; use --precision\n")


def test_a_broken_rule_exits_one_and_reproducers_follow_the_report(recorded, target, capsys):
    _, report = recorded
    report["value"] = _Report(
        False,
        [
            _Failure("masked NaN [float32, cpu]", "print(1)"),
            _Failure("empty [float32, cpu]", "print(2)"),
        ],
    )
    assert main(["check", target]) == 1
    assert capsys.readouterr().out == "REPORT-TEXT\n"
    assert main(["check", target, "--reproducers"]) == 1
    assert capsys.readouterr().out == (
        "REPORT-TEXT\n\n# reproducer: masked NaN [float32, cpu]\nprint(1)\n"
        "\n# reproducer: empty [float32, cpu]\nprint(2)\n"
    )


def test_zero_examples_is_allowed_and_a_negative_number_refused(recorded, target, capsys):
    calls, _ = recorded
    assert main(["check", target, "--examples", "0"]) == 0
    assert main(["check", target, "--examples", "-1"]) == 2
    assert capsys.readouterr().err == "attnlab check: error: --examples must be >= 0; got -1\n"
    assert len(calls) == 1


def test_a_file_target_is_imported_by_its_path(target):
    fn = load_function(target)
    assert fn(1, 2, 3, 4) == 1 and fn.__module__ == "myattn_for_check"


def test_a_module_target_is_imported_by_name():
    assert load_function("attnlab.cli.check:load_function") is load_function
    assert load_function("os.path:join")("a", "b") in ("a/b", "a\\b")


@pytest.mark.parametrize("bad", ["nocolon", ":attention", "attnlab:", ""])
def test_a_target_without_module_and_function_is_refused(bad, capsys):
    assert main(["check", bad]) == 2
    assert capsys.readouterr().err == (
        "attnlab check: error: give the function as MODULE:FUNCTION "
        f"(e.g. mypkg.attn:attention); got {bad!r}\n"
    )


def test_each_bad_target_has_its_own_message(tmp_path, target, capsys):
    missing = tmp_path / "missing.py"
    module = target.rsplit(":", 1)[0]
    cases = [
        (f"{missing}:f", f"{missing}: no such file"),
        (
            "no_such_pkg_xyz.sub:f",
            "cannot import 'no_such_pkg_xyz.sub': No module named 'no_such_pkg_xyz'",
        ),
        ("attnlab:no_such_function", "attnlab has no function 'no_such_function'"),
        (f"{module}:NOT_CALLABLE", f"{module} has no function 'NOT_CALLABLE'"),
        (f"{module}:missing_name", f"{module} has no function 'missing_name'"),
    ]
    for bad, says in cases:
        assert main(["check", bad]) == 2, bad
        assert capsys.readouterr().err == f"attnlab check: error: {says}\n"


def test_a_folder_named_like_a_file_is_no_file(tmp_path, capsys):
    folder = tmp_path / "pkg.py"
    folder.mkdir()
    assert main(["check", f"{folder}:f"]) == 2
    assert capsys.readouterr().err == f"attnlab check: error: {folder}: no such file\n"


def test_the_file_module_is_registered_once_under_its_stem(tmp_path):
    import sys

    path = tmp_path / "stem_registered_here.py"
    path.write_text(GOOD)
    sys.modules.pop("stem_registered_here", None)
    try:
        fn = load_function(f"{path}:attention")
        assert isinstance(sys.modules["stem_registered_here"], types.ModuleType)
        assert sys.modules["stem_registered_here"].attention is fn
    finally:
        sys.modules.pop("stem_registered_here", None)
