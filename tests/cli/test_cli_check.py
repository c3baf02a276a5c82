"""``attnlab check MODULE:FUNCTION``: the contract checker on the command line (exit 0 / 1 / 2)."""

from __future__ import annotations

import os
import subprocess
import sys

TEXTBOOK = '''import torch
def attention(q, k, v, mask):
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
'''
GOOD = '''import attnlab
def attention(q, k, v, mask):
    return attnlab.attention(q, k, v, mask=mask)[0]
'''


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "attnlab", "check", *args], capture_output=True, text=True, cwd=cwd)


def test_the_textbook_attention_fails_with_the_rules_it_breaks(tmp_path):
    (tmp_path / "textbook.py").write_text(TEXTBOOK)
    r = _run(f"{tmp_path / 'textbook.py'}:attention", "--reproducers")
    assert r.returncode == 1, r.stderr
    assert "NaN in a masked value reached the output" in r.stdout
    assert "a fully masked row gives NaN" in r.stdout
    source = r.stdout.split("# reproducer: masked NaN value [float32, cpu]\n", 1)[1].split("\n# reproducer:", 1)[0]
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "NaN in a masked value reached the output" in done.stderr


def test_a_conforming_function_in_an_importable_module_exits_zero(tmp_path):
    (tmp_path / "goodattn.py").write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "attnlab", "check", "goodattn:attention", "--no-grad"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "conforms" in r.stdout and "FAIL" not in r.stdout


def test_a_bad_target_is_one_line_and_exit_two(tmp_path):
    for target, says in (("nocolon", "MODULE:FUNCTION"), ("no_such_pkg_xyz:f", "cannot import"),
                         (f"{tmp_path / 'missing.py'}:f", "no such file"), ("attnlab:no_such_function", "no function")):
        r = _run(target)
        assert r.returncode == 2, (target, r.stderr)
        assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_examples_tries_generated_inputs_and_shrinks_the_failure(tmp_path):
    (tmp_path / "textbook.py").write_text(TEXTBOOK)
    r = _run(f"{tmp_path / 'textbook.py'}:attention", "--examples", "20", "--no-grad")
    assert r.returncode == 1, r.stderr
    assert "generated inputs (20 examples) [float32, cpu]" in r.stdout
    (tmp_path / "goodattn.py").write_text(GOOD)
    good = _run(f"{tmp_path / 'goodattn.py'}:attention", "--examples", "20", "--no-grad")
    assert good.returncode == 0 and "FAIL" not in good.stdout, good.stdout + good.stderr
    bad = _run(f"{tmp_path / 'goodattn.py'}:attention", "--examples", "-1")
    assert bad.returncode == 2 and "--examples must be >= 0; got -1" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_signature_defaults_to_a_bool_mask_argument(tmp_path, capsys):
    from attnlab.cli import main

    (tmp_path / "goodattn_default.py").write_text(GOOD)
    assert main(["check", f"{tmp_path / 'goodattn_default.py'}:attention", "--no-grad"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.startswith("attention (signature 'qkv_mask'): conforms, ")
