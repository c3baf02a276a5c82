"""``attnlab check``: an error in the user's own code at import is named as theirs (exit 2, one line,
never "internal error"); a function that exits or hangs gets a report and exit 1, never exit 0 with
nothing printed; refused options are one line, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from attnlab.cli import main


def _file(tmp_path, name: str, source: str) -> str:
    path = tmp_path / name
    path.write_text(source)
    return str(path)


@pytest.mark.parametrize(("name", "source", "says"), [
    ("syntax_error_attn.py", "def attention(q, k, v, mask):\n    return q +\n",
     "your code has a syntax error at line 2: invalid syntax"),
    ("raises_attn.py", "x = 1 / 0\n", "your code raised ZeroDivisionError while it was imported: division by zero"),
    ("exits_attn.py", "import sys\nsys.exit(3)\n", "your code called sys.exit(3) while it was imported"),
])
def test_an_error_in_the_users_file_at_import_is_theirs_in_one_line(tmp_path, capsys, name, source, says):
    path = _file(tmp_path, name, source)
    assert main(["check", f"{path}:attention"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"attnlab check: error: {path}: {says}\n"
    assert captured.out == ""
    assert name.removesuffix(".py") not in sys.modules  # not left half-imported under its name


def test_an_error_in_the_users_module_at_import_is_theirs_too(tmp_path, capsys, monkeypatch):
    _file(tmp_path, "module_raises_attn.py", "raise RuntimeError('not configured')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check", "module_raises_attn:attention"]) == 2
    assert capsys.readouterr().err == ("attnlab check: error: module_raises_attn: your code raised RuntimeError "
                                       "while it was imported: not configured\n")


@pytest.mark.parametrize(("argv", "says"), [
    (["--seed", "4294967296"], "--seed must be from 0 to 2**32 - 1; got 4294967296"),
    (["--seed", "-1"], "--seed must be from 0 to 2**32 - 1; got -1"),
    (["--timeout", "0"], "--timeout must be a positive number of seconds; got 0"),
    (["--device", "meta"], "--device 'meta' is not a device the checker runs on; give 'cpu', 'cuda' or 'mps'"),
    (["--device", "gpu0"], "--device 'gpu0' is not a device name; give names such as 'cpu', 'cuda' or 'cuda:1'"),
])
def test_a_refused_option_is_one_line_and_exit_two(tmp_path, capsys, argv, says):
    path = _file(tmp_path, "fine_attn.py", "import attnlab\nattention = attnlab.attention\n")
    assert main(["check", f"{path}:attention", *argv]) == 2
    assert capsys.readouterr().err == f"attnlab check: error: {says}\n"


def test_cuda_without_cuda_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    path = _file(tmp_path, "fine_cuda_attn.py", "import attnlab\nattention = attnlab.attention\n")
    assert main(["check", f"{path}:attention", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == ("attnlab check: error: --device 'cuda' is not available here "
                                       "(torch.cuda.is_available() is False); check on 'cpu', or on a machine with CUDA\n")


def test_a_function_that_hangs_fails_with_a_report(tmp_path, capsys):
    path = _file(tmp_path, "hangs_attn.py", "import threading\nRELEASE = threading.Event()\n"
                 "def attention(q, k, v, mask):\n    RELEASE.wait()\n")
    try:
        assert main(["check", f"{path}:attention", "--timeout", "0.5"]) == 1
    finally:
        sys.modules["hangs_attn"].RELEASE.set()
        del sys.modules["hangs_attn"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "attention (signature 'qkv_mask'): 1 failed, 0 passed"
    assert lines[1] == ("  FAIL values [float32, cpu]: did not return within the time limit (0.5 s per case); "
                        "the cases after it were not run  [smallest input: b=2 h=2 q=130 k=257 d=128]")
    assert lines[2].startswith("  not run (the function hung in an earlier case): deterministic [float32, cpu], ")


def test_a_function_that_calls_sys_exit_zero_exits_one_with_its_report(tmp_path):
    path = _file(tmp_path, "exits_zero_attn.py", "import sys\ndef attention(q, k, v, mask):\n    sys.exit(0)\n")
    done = subprocess.run([sys.executable, "-m", "attnlab", "check", f"{path}:attention", "--no-grad"],
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("attention (signature 'qkv_mask'): 16 failed, 0 passed\n")
    assert ("  FAIL values [float32, cpu]: raised SystemExit (sys.exit(0)): the function tried to exit  "
            "[smallest input: b=1 h=1 q=1 k=2 d=1]") in done.stdout.splitlines()
    assert done.stderr == ""
