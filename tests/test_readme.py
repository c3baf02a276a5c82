"""Every ```python block in README.md runs on its own, in a fresh namespace (a reader may copy any one),
and what it says it prints, it prints.

A block whose first line is ``# no-test`` is skipped (used sparingly, for
blocks that need data or minutes).

Printed output shown in the README is checked. The convention: a top-level
statement (usually a ``print``) ends with a comment

    print(x)   # prints: tensor([[1.5267, 0.9687, 0.8797]])
    print(y)   # → 3 5  — a note after " — " is not compared

and the text after ``prints:`` (or ``→``) is compared with what that statement
writes to stdout: numbers within half a unit of the last digit written (``0.9687...``
means "starts with these digits"), everything else token for token.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
CLAIM = re.compile(r"#\s*(?:prints:|→)\s*(.*?)\s*(?:\s—\s.*)?$")
TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\.\.\.)?|\w+|[^\w\s]")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\.\.\.)?$")


def _claim(line: str) -> str | None:
    """The expected output in a source line's trailing comment, if it has one."""
    if "#" not in line:
        return None
    m = CLAIM.search(line[line.index("#"):])
    return m.group(1) if m else None


def matches(expected: str, printed: str) -> bool:
    """``printed`` agrees with ``expected`` token by token (numbers to the precision written)."""
    want, got = TOKEN.findall(expected), TOKEN.findall(printed)
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        if NUMBER.match(w) and NUMBER.match(g):
            if w.endswith("..."):
                if not g.startswith(w[:-3]):
                    return False
                continue
            decimals = len(w.split(".")[1]) if "." in w and "e" not in w.lower() else 0
            if abs(float(w) - float(g)) > 0.5 * 10**-decimals + 1e-12:
                return False
        elif w != g:
            return False
    return True


@pytest.mark.parametrize(
    "expected,printed,ok",
    [
        ("tensor([[1.5267, 0.9687]])", "tensor([[1.5267, 0.9687]])", True),
        ("tensor([[1.5267, 0.9687]])", "tensor([[1.5268, 0.9687]])", False),
        ("0.880", "0.88049", True),
        ("0.880", "0.8806", False),
        ("wrong 0.9687...", "wrong 0.9687488", True),
        ("wrong 0.9687...", "wrong 0.9688", False),
        ("wrong 0.9687...", "exact 0.9687488", False),
        ("3 5", "3 5 7", False),
        ("['cat', 'dog'] [2, 4]", "['cat', 'dog'] [2, 4]", True),
    ],
)
def test_matches(expected, printed, ok):
    assert matches(expected, printed) is ok


def test_readme_has_examples():
    assert len(BLOCKS) >= 1
    assert sum(_claim(line) is not None for b in BLOCKS for line in b.splitlines()) >= 4


RUN = [(n, b) for n, b in enumerate(BLOCKS, start=1) if not b.lstrip().startswith("# no-test")]


@pytest.mark.parametrize("n, block", RUN, ids=[f"block{n}" for n, _ in RUN])
def test_readme_example_runs_on_its_own_and_prints_what_it_says(tmp_path, monkeypatch, n, block):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    lines = block.splitlines()
    try:
        tree = ast.parse(block, f"README.md block {n}")
    except SyntaxError as e:  # pragma: no cover - the message is the point
        pytest.fail(f"README block {n} does not parse: {e}")
    claims = {i + 1: c for i, line in enumerate(lines) if (c := _claim(line)) is not None}
    for stmt in tree.body:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(ast.Module([stmt], []), f"README.md block {n}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message is the point
            pytest.fail(f"README block {n} failed on its own at line {stmt.lineno}: {type(e).__name__}: {e}\n{block}")
        claim = claims.pop(stmt.end_lineno, None)
        if claim is not None:
            printed = buf.getvalue().strip()
            assert matches(claim, printed), (
                f"README block {n} line {stmt.end_lineno}: the comment says it prints {claim!r}; it printed {printed!r}"
            )
    assert not claims, f"README block {n}: 'prints:' comments on lines that are not a statement's last: {claims}"
