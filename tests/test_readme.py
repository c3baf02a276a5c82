"""Every ```python block in README.md runs, in order, in one namespace.

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


def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for n, block in enumerate(BLOCKS, start=1):
        if block.lstrip().startswith("# no-test"):
            continue
        try:
            exec(compile(block, f"README.md block {n}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message is the point
            pytest.fail(f"README block {n} failed: {type(e).__name__}: {e}\n{block}")
