"""The Markdown walkthrough's math: every formula and every matrix is display math alone on its
line (``$$ … $$`` with a blank line either side), the form that GitHub, pandoc and MkDocs'
arithmatex all read; no ``$`` sits inside a line of text, where a renderer would leave it raw."""

from __future__ import annotations

import re

import pytest

from attnlab.explain import builtin_names, load, render_markdown, run, verify

DISPLAY = re.compile(r"^\$\$[^$]+\$\$$")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", builtin_names())
def test_every_formula_is_a_display_block_on_its_own_line(name, lang):
    ex = load(name)
    t = run(ex)
    lines = render_markdown(ex, t, verify(ex, t), lang=lang).split("\n")
    math = [i for i, line in enumerate(lines) if "$" in line]
    assert math, "a walkthrough shows its formulas and values"
    for i in math:
        assert DISPLAY.match(lines[i]), f"line {i + 1} mixes math and text: {lines[i]!r}"
        assert i == 0 or lines[i - 1] == "", f"line {i + 1} is not a paragraph of its own"
        assert i + 1 == len(lines) or lines[i + 1] == "", f"line {i + 1} is not a paragraph of its own"


def test_given_values_are_shown_as_matrices_under_their_names():
    ex = load("tutorial1-additive")
    t = run(ex)
    md = render_markdown(ex, t, lang="en")
    want = "`query`\n\n$$\\begin{bmatrix} 0.6000 & -0.2000 \\end{bmatrix}$$\n"  # the example's query, by hand
    assert want in md
    assert "`v`\n\n$$\\begin{bmatrix} 1.0000 & 2.0000 \\end{bmatrix}$$\n" in md
    assert "\n\n\n" not in md  # one blank line between paragraphs
