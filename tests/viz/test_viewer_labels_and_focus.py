"""The viewer page's data for its labels and its start state, read without a browser.

The matrix view labels its rows with the query tokens and its columns with the key tokens: the page
carries both lists for every section (numbers from 1 where the data has no tokens), and the page has
the places they go. The page opens on a start state (view, layer, head, query token), counted from 1 as
the page shows them; ``attnlab view --focus N`` writes it, and refuses 0 or a token past the end in one line.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from attnlab.cli import main
from attnlab.viz.viewer import payload, render_html


class _Page(HTMLParser):
    """The ids of the page's elements, its <select>s, and the text of its data block."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.selects: list[str | None] = []
        self.data = ""
        self._in_data = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "select":
            self.selects.append(a.get("id"))
        self._in_data = tag == "script" and a.get("id") == "data"

    def handle_endtag(self, tag):
        self._in_data = False

    def handle_data(self, data):
        if self._in_data:
            self.data += data


def _read(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    return p


def _uniform(q: int, k: int, layers: int = 1, heads: int = 1) -> np.ndarray:
    return np.full((layers, heads, q, k), 1.0 / k, dtype=np.float32)


def test_cross_attention_labels_rows_with_queries_and_columns_with_keys():
    data = {"sections": [
        {"name": "encoder", "layers": _uniform(3, 3), "tokens": ["a", "b", "c"]},
        {"name": "cross", "layers": _uniform(2, 3), "tokens": ["x", "y"], "key_tokens": ["a", "b", "c"]}]}
    page = _read(render_html(data))
    sections = json.loads(page.data)["sections"]
    assert [(s["tokens"], s["key_tokens"]) for s in sections] == [(["a", "b", "c"], ["a", "b", "c"]),
                                                                  (["x", "y"], ["a", "b", "c"])]
    assert [(s["y_axis"], s["x_axis"]) for s in sections] == [("query", "key")] * 2
    # the matrix view's label places: a corner naming the axes, the column labels, the row labels
    assert {"mx-corner", "mx-cols", "mx-rows", "mx-canvas"} <= page.ids


def test_data_without_tokens_is_labelled_with_numbers_from_1():
    p = payload({"layers": _uniform(3, 4)})
    assert p["sections"][0]["tokens"] == ["1", "2", "3"]
    assert p["sections"][0]["key_tokens"] == ["1", "2", "3", "4"]


def test_one_head_control_and_no_head_dropdown():
    page = _read(render_html({"layers": _uniform(2, 2, heads=3)}))
    assert "head" not in page.ids and "heads" in page.ids
    assert page.selects == ["layer", "nv-q", "nv-k"]  # layer, and the neuron view's query and key


def test_the_start_state_travels_in_the_page_counted_from_1():
    page = _read(render_html({"layers": _uniform(4, 4, layers=2, heads=3)},
                             start={"view": "matrix", "layer": 2, "head": 3, "query": 4}))
    assert json.loads(page.data)["start"] == {"view": "matrix", "layer": 2, "head": 3, "query": 4}
    assert json.loads(_read(render_html({"layers": _uniform(2, 2)})).data)["start"] == {}


@pytest.mark.parametrize("start, says", [
    ({"query": 0}, "query counts from 1 and must be in 1..4; got 0"),
    ({"query": 5}, "1..4; got 5"),
    ({"head": 4}, "head counts from 1 and must be in 1..3"),
    ({"layer": True}, "layer"),
    ({"view": "table"}, "head, model, neuron, matrix; got 'table'"),
    ({"token": 1}, "got token"),
])
def test_a_bad_start_state_is_refused(start, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        render_html({"layers": _uniform(4, 4, layers=2, heads=3)}, start=start)


def test_cli_focus_counts_from_1_without_a_screenshot(tmp_path, capsys):
    out = tmp_path / "p.html"
    assert main(["view", "--example", "tutorial2-multi-head", "-o", str(out), "--focus", "5"]) == 0
    assert json.loads(_read(out.read_text(encoding="utf-8")).data)["start"] == {"query": 5}
    capsys.readouterr()
    for focus, says in (("0", "--focus counts from 1 (the first token is 1); got 0"),
                        ("6", "--focus counts from 1 and this page has 5 query tokens (1..5); got 6")):
        assert main(["view", "--example", "tutorial2-multi-head", "-o", str(tmp_path / "x.html"), "--focus", focus]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.html").exists()  # refused before anything is written


def test_cli_focus_help_says_it_counts_from_1(capsys):
    with pytest.raises(SystemExit):
        main(["view", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "counted from 1" in help_text and "the first token is 1" in help_text
