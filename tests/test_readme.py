"""Every ```python block in README.md runs on its own, in a fresh namespace (a reader may copy any one).

A block whose first line is ``# no-test`` is skipped (used sparingly, for
blocks that need data or minutes).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 1


RUN = [(n, b) for n, b in enumerate(BLOCKS, start=1) if not b.lstrip().startswith("# no-test")]


@pytest.mark.parametrize("n, block", RUN, ids=[f"block{n}" for n, _ in RUN])
def test_readme_example_runs_on_its_own(tmp_path, monkeypatch, n, block):
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(block, f"README.md block {n}", "exec"), {"__name__": "__readme__"})
    except Exception as e:  # pragma: no cover - the message is the point
        pytest.fail(f"README block {n} failed on its own: {type(e).__name__}: {e}\n{block}")
