"""The documentation: the site builds with ``mkdocs build --strict`` (worked examples computed at
build time, API pages from the docstrings), every page is in English and Chinese, and every
notebook runs."""

from __future__ import annotations

import os
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


def import_hooks():
    sys.path.insert(0, str(DOCS))
    try:
        import hooks
    finally:
        sys.path.remove(str(DOCS))
    return hooks


def test_walkthrough_hook_inserts_the_computed_numbers():
    hooks = import_hooks()
    page = "before\n<!-- walkthrough: tutorial1-additive additive en -->\nafter"
    out = hooks.on_page_markdown(page, None, None, None)
    assert "<!--" not in out and out.startswith("before\n") and out.endswith("after")
    assert "1.5267" in out and "0.4771" in out  # the tutorial's scores and first weight, computed
    assert re.search(r"^## ", out, re.M) and not re.search(r"^# ", out, re.M)  # headings moved down


def test_math_hook_turns_arithmatex_output_into_mathml():
    pytest.importorskip("latex2mathml")
    hooks = import_hooks()
    html = ('<p>so <span class="arithmatex">\\(q^\\top k\\)</span> and</p>\n'
            '<div class="arithmatex">\\[\\begin{bmatrix} 1 &amp; -\\infty \\end{bmatrix}\\]</div>')
    out = hooks.on_page_content(html, None, None, None)
    assert "arithmatex" not in out and "\\(" not in out and "\\[" not in out
    inline, block = re.findall(r"<math [^>]*>.*?</math>", out, re.S)
    assert 'display="inline"' in inline and "<mi>q</mi>" in inline and "<mi>k</mi>" in inline
    assert 'display="block"' in block and "<mtable>" in block and "<mn>1</mn>" in block
    assert block.count("<mtd>") == 2 and "&#x0221E;" in block  # &amp; read back as the cell separator; infinity


def test_math_hook_refuses_a_command_it_cannot_render():
    pytest.importorskip("latex2mathml")
    hooks = import_hooks()
    with pytest.raises(ValueError, match=r"\\nosuchcommand"):
        hooks.on_page_content('<span class="arithmatex">\\(\\nosuchcommand x\\)</span>', None, None, None)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("mkdocs")
    pytest.importorskip("latex2mathml")
    out = tmp_path_factory.mktemp("docs") / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def pages(site: Path) -> dict[str, str]:
    return {str(p.relative_to(site)): p.read_text(encoding="utf-8") for p in sorted(site.rglob("*.html"))}


def test_site_builds_strict(site):
    page = (site / "zh" / "tutorial" / "additive" / "index.html").read_text(encoding="utf-8")
    assert "1.5267" in page  # the walkthrough was computed into the Chinese page too
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert "masked_softmax" in api


def test_pages_load_nothing_from_the_network(site):
    remote = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)
    for name, html in pages(site).items():
        found = remote.search(html)
        assert not found, f"{name} loads {found.group(0)!r} from the network"
        assert "cdn." not in html, f"{name} names a CDN"


def visible_text(html: str) -> str:
    """The page's text as a reader sees it: no code, scripts or MathML, no tags."""
    html = re.sub(r"<(pre|code|script|style|math)\b.*?</\1>", " ", html, flags=re.S | re.I)
    return re.sub(r"<[^>]+>", " ", html)


def test_no_page_shows_raw_tex(site):
    for name, html in pages(site).items():
        text = visible_text(html)
        for raw in ("$", "\\(", "\\[", "\\begin{", "\\frac", "\\top"):
            at = text.find(raw)
            assert at < 0, f"{name} shows raw TeX {raw!r}: ...{text[max(0, at - 80):at + 80]!r}..."
        assert "arithmatex" not in html, f"{name} keeps math for a script to render"


def test_worked_example_page_shows_its_formulas_and_values_as_mathml(site):
    for page in ("tutorial/additive/index.html", "zh/tutorial/additive/index.html"):
        html = (site / page).read_text(encoding="utf-8")
        blocks = re.findall(r'<math [^>]*display="block"[^>]*>.*?</math>', html, re.S)
        assert len(blocks) >= 10, page  # the page's own formula, the given values and each step
        scores = [b for b in blocks if "<mtable>" in b and "<mn>1.5267</mn>" in b]
        assert len(scores) == 1 and "<mn>0.9687</mn>" in scores[0] and "<mn>0.8797</mn>" in scores[0]
        assert any("<mi>&#x003B1;</mi>" in b and "<mfrac>" in b for b in blocks)  # the softmax weights
        assert "assets/math.css" in html  # the math font, shipped with the site
    css = (site / "assets" / "math.css").read_text(encoding="utf-8")
    font = re.search(r'url\("([^"]+\.woff2)"\)', css)
    assert font and (site / "assets" / font.group(1)).is_file()


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
