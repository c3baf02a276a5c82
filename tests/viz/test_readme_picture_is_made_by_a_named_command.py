"""The README's picture of the viewer is made by a command the docs name (``make readme-images``), which
attnlab may run over the tracked file (it carries attnlab's mark), while the README's own screenshot command
writes elsewhere; and the demo's extras (``[lab,viz]``) hold what a screenshot needs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from attnlab.viz.screenshot import ours

ROOT = Path(__file__).resolve().parents[2]
PICTURE = "docs/images/head-view.png"


def _target(name: str) -> str:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    m = re.search(rf"^{name}:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert m, f"the Makefile has no {name} target"
    return m.group(1).replace("\\\n", " ")


def test_make_readme_images_writes_the_readmes_picture_with_the_documented_view():
    recipe = _target("readme-images")
    assert f"--screenshot {PICTURE}" in recipe and "--example tutorial2-multi-head" in recipe and "--focus 2" in recipe
    phony = (ROOT / "Makefile").read_text(encoding="utf-8").split(".PHONY:")[1].splitlines()[0].split()
    assert "readme-images" in phony
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"]({PICTURE})" in readme and "make readme-images" in readme


def test_the_tracked_picture_is_attnlabs_so_the_target_may_replace_it():
    assert ours(ROOT / PICTURE)


def test_no_readme_or_docs_command_writes_over_the_tracked_picture():
    for page in ["README.md", *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]:
        for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
            words = shlex.split(line.split("#")[0]) if line.strip().startswith("attnlab view") else []
            if "--screenshot" in words:  # a command a reader may paste
                assert words[words.index("--screenshot") + 1] != PICTURE, f"{page}: {line.strip()}"


def test_the_demos_extras_hold_playwright():
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert any(r.startswith("playwright") for r in extras["viz"])
    assert '-e ".[lab,viz]"' in (ROOT / "Makefile").read_text(encoding="utf-8")
