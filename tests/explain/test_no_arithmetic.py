"""Explain reads, never recomputes: no arithmetic of attention in attnlab/explain."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import attnlab.explain
from attnlab.explain import builtin_names, load, run
from attnlab.explain.mechanisms import path_for
from attnlab.functional import steps

SRC = Path(attnlab.explain.__file__).parent
# Calls that would be a second copy of a mechanism's arithmetic.
ARITHMETIC = {"softmax", "masked_softmax", "tanh", "exp", "sigmoid", "linear", "conv2d", "relu", "matmul", "bmm",
              "einsum", "mean", "amax", "sum", "merge_heads", "attention", "dot", "scaled_dot"}


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            out.append(f"{path.name}:{node.lineno}: @")
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
            if name in ARITHMETIC and not (isinstance(f, ast.Name) and name == "sum"):  # counting claims is fine
                out.append(f"{path.name}:{node.lineno}: {name}()")
    return out


def test_explain_has_no_second_copy_of_the_arithmetic():
    # mechanisms.py runs the library (attention, multi_head_attention, ... inside trace()): that is the one copy
    files = [p for p in SRC.glob("*.py") if p.name != "mechanisms.py"]
    assert not (SRC / "chains.py").exists() and not (SRC / "claims.py").exists()
    offences = [o for p in files for o in _offences(p)]
    assert offences == []


def test_the_offence_scan_works(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import torch\ny = torch.softmax(x, -1) @ v\n", encoding="utf-8")
    assert len(_offences(f)) == 2


@pytest.mark.parametrize("name", builtin_names())
def test_every_recorded_step_has_a_step_function(name):
    """verify recomputes each recorded step with the functional layer's step function for it."""
    ex = load(name)
    t = run(ex)
    env, path = path_for(ex)
    assert set(t.names()) <= set(path), set(t.names()) - set(path)
    assert all(isinstance(s, steps.StepFn) for s in path.values())
    env = dict(env)
    for step in t:  # each step from the recorded earlier steps (not from the inputs): the library's values
        got = steps.evaluate(path, env, step.name)
        torch.testing.assert_close(got, step.value, rtol=0, atol=1e-12, equal_nan=True, msg=step.name)
        env[step.name] = step.value
