"""Every ```python block in README.md and in the documentation pages that hold the guide's examples
runs on its own, in a fresh namespace (a reader may copy any one), and what it says it prints, it prints.
The README itself stays a short first page: at most 400 lines, a table of contents that links to its
own headings, and no path outside the repository.

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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The pages whose examples are run: the README and the guide's pages in docs/.
PAGES = ["README.md"] + [f"docs/{name}.md" for name in (
    "contract", "testing", "classic", "transformer", "long-sequences", "devices", "files",
    "distributed", "modern", "vision", "recommendation", "experiments", "explain", "interpretability",
    "huggingface", "architecture")]
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def blocks(page: str) -> list[str]:
    """The page's ```python blocks, each up to the fence that closes it."""
    return FENCE.findall((ROOT / page).read_text(encoding="utf-8"))


BLOCKS = blocks("README.md")
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


def test_readme_and_guide_have_examples_that_say_what_they_print():
    assert len(BLOCKS) >= 1 and any(_claim(line) for b in BLOCKS for line in b.splitlines())
    every = [b for page in PAGES for b in blocks(page)]
    assert sum(_claim(line) is not None for b in every for line in b.splitlines()) >= 4


RUN = [(page, n, b) for page in PAGES for n, b in enumerate(blocks(page), start=1)
       if not b.lstrip().startswith("# no-test")]


@pytest.mark.parametrize("page, n, block", RUN, ids=[f"{page}-block{n}" for page, n, _ in RUN])
def test_example_runs_on_its_own_and_prints_what_it_says(tmp_path, monkeypatch, page, n, block):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    lines = block.splitlines()
    try:
        tree = ast.parse(block, f"{page} block {n}")
    except SyntaxError as e:  # pragma: no cover - the message is the point
        pytest.fail(f"{page} block {n} does not parse: {e}")
    claims = {i + 1: c for i, line in enumerate(lines) if (c := _claim(line)) is not None}
    for stmt in tree.body:
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(ast.Module([stmt], []), f"{page} block {n}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message is the point
            pytest.fail(f"{page} block {n} failed on its own at line {stmt.lineno}: {type(e).__name__}: {e}\n{block}")
        claim = claims.pop(stmt.end_lineno, None)
        if claim is not None:
            printed = buf.getvalue().strip()
            assert matches(claim, printed), (
                f"{page} block {n} line {stmt.end_lineno}: the comment says it prints {claim!r}; it printed {printed!r}"
            )
    assert not claims, f"{page} block {n}: 'prints:' comments on lines that are not a statement's last: {claims}"


def test_every_fence_of_a_tested_page_is_closed():
    """A ```python block left open swallows the text after it, and its examples would run nowhere."""
    for page in PAGES:
        fences = re.findall(r"^```", (ROOT / page).read_text(encoding="utf-8"), flags=re.M)
        assert len(fences) % 2 == 0, f"{page} has a code fence that is never closed"


def anchor(heading: str) -> str:
    """The anchor GitHub (and MkDocs' toc) gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_readme_is_a_short_first_page_with_a_table_of_contents():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 400
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    headings = {anchor(h) for h in re.findall(r"^#{2,6} (.+)$", prose, flags=re.M)}
    toc = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(toc) >= 4, "the README has no table of contents"
    assert "the-two-commands" in toc and "where-to-go-next" in toc
    missing = [a for a in toc if a not in headings]
    assert not missing, f"table-of-contents entries that name no heading: {missing}"


def test_readme_names_no_path_outside_the_repository():
    text = README.read_text(encoding="utf-8")
    for outside in ("shared/", "../"):
        assert outside not in text, f"README.md points outside the repository: {outside!r}"
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), f"README.md links to {target}, which is not in the repository"
