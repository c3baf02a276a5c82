"""The page docs/testing.md: its Python runs, it describes every case, and its scorecard rows for the
textbook implementation and attnlab are the ones the script prints now."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_every_python_block_of_the_page_runs_and_prints_a_failure():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert blocks
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(block, {})
    assert "FAIL masked NaN value [float32, cpu]: NaN in a masked value reached the output" in out.getvalue()
    assert "judge('masked NaN value', out, q, k, v" in out.getvalue()
    assert "a fully masked row is not zero\nTrue\n" in out.getvalue()  # the generated inputs' block


def test_the_page_lists_every_case_of_the_checker():
    from attnlab.testing.cases import CASES

    text = PAGE.read_text(encoding="utf-8")
    for case in CASES:
        name = case.name if not case.name.startswith("empty") else "empty keys, batch, queries"
        assert f"| {name} |" in text, f"docs/testing.md does not describe the case {case.name!r}"


def test_the_scorecard_on_the_page_is_the_one_the_script_prints():
    from attnlab.testing import scorecard

    rows = [r for r in scorecard.ROWS if r[0].startswith("textbook") or r[0] == "attnlab `attention`"]
    table = scorecard.scorecard(rows).splitlines()
    page = PAGE.read_text(encoding="utf-8").splitlines()
    for line in table[:2]:
        assert line in page
    for line in table[2:]:  # the version in the row may differ from the page's
        assert re.sub(r" \((torch|attnlab) [^)]*\)", "", line) in [re.sub(r" \((torch|attnlab) [^)]*\)", "", p) for p in page]


def _page_rows_are_printed(prefixes: tuple[str, ...]) -> None:
    from attnlab.testing import scorecard

    rows = [r for r in scorecard.ROWS if r[0].startswith(prefixes)]
    assert len(rows) == len(prefixes)
    table = scorecard.scorecard(rows).splitlines()[2:]
    assert len(table) == len(rows)
    page = [re.sub(r" \((torch|transformers) [^)]*\)", "", p) for p in PAGE.read_text(encoding="utf-8").splitlines()]
    for line in table:
        assert re.sub(r" \((torch|transformers) [^)]*\)", "", line) in page, line


def test_the_multihead_and_transformers_rows_on_the_page_are_the_ones_the_script_prints():
    """MultiheadAttention fails two of the empty cases (each named in the one "empty" column), and
    transformers' eager Llama attention gives a fully masked row that is not zero."""
    pytest.importorskip("transformers")
    _page_rows_are_printed(("torch `nn.MultiheadAttention`", "transformers Llama"))


def test_the_flex_attention_row_on_the_page_is_the_one_the_script_prints():
    """flex_attention in eager mode (about 15 s on the CPU): the mask expanded to (b, h, q, k) by its score_mod."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    _page_rows_are_printed(("torch `flex_attention`",))
