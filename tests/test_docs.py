"""The documentation: the site builds with ``mkdocs build --strict`` (worked examples computed at
build time, API pages from the docstrings), every page is in English and Chinese, and every
notebook runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((DOCS / "notebooks").glob("*.ipynb"))


def test_every_tutorial_page_has_a_chinese_twin_with_the_same_walkthroughs():
    marker = re.compile(r"<!-- walkthrough: (\S+) (\S+) (en|zh) -->")
    pages = sorted((DOCS / "tutorial").glob("*.md"))
    assert len(pages) == 9
    for page in pages:
        zh = DOCS / "zh" / "tutorial" / page.name
        assert zh.is_file(), f"{zh} is missing"
        en_w = [m[:2] for m in marker.findall(page.read_text())]
        zh_w = [m[:2] for m in marker.findall(zh.read_text())]
        assert en_w == zh_w, f"{page.name}: walkthroughs differ between en and zh"
        assert all(m[2] == "zh" for m in marker.findall(zh.read_text()))


def test_walkthrough_hook_inserts_the_computed_numbers():
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    page = "before\n<!-- walkthrough: seed-000-additive additive en -->\nafter"
    out = hooks.on_page_markdown(page, None, None, None)
    assert "<!--" not in out and out.startswith("before\n") and out.endswith("after")
    assert "1.5267" in out and "0.4771" in out  # the seed's scores and first weight, computed
    assert re.search(r"^## ", out, re.M) and not re.search(r"^# ", out, re.M)  # headings moved down


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    page = (tmp_path / "site" / "zh" / "tutorial" / "additive" / "index.html").read_text(encoding="utf-8")
    assert "1.5267" in page  # the walkthrough was computed into the Chinese page too
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "masked_softmax" in api


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(notebook, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(notebook, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_notebooks_are_what_the_script_writes(tmp_path):
    script = (DOCS / "notebooks" / "make_notebooks.py").read_text()
    assert len(NOTEBOOKS) >= 3
    for nb in NOTEBOOKS:
        assert nb.name in script
