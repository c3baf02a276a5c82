"""The viewer page's inline data block: any token or title text travels through it unchanged.

The page is parsed here with Python's HTML parser (not the library's code): the text between
the data block's tags must be JSON that reads back as the same strings, and no token may end
the block early or switch the HTML parser into a state where ``</script>`` no longer closes it.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np

from attnlab.viz.viewer import render_html

HOSTILE = ["<!--<script>", "</script>", "</SCRIPT >", "<!--", "-->", "a&amp;b", "x\u2028y", "p\u2029q",
           "\ud800", "__DATA__", "__TITLE__", "]]>", "<\\/script>", "😀"]


class _Scripts(HTMLParser):
    """Collects each <script>'s attributes and its text as the HTML parser sees it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self._open: dict | None = None
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._open = dict(attrs)
            self.scripts.append((self._open, ""))
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        self._open = None if tag == "script" else self._open
        self._in_title = False

    def handle_data(self, data):
        if self._open is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        elif self._in_title:
            self.title += data


def _page(tokens, title):
    n = len(tokens)
    w = np.full((1, 1, n, n), 1.0 / n, dtype=np.float32)
    return render_html({"title": title, "layers": w, "tokens": tokens})


def test_hostile_tokens_and_title_round_trip_through_the_data_block():
    page = _page(HOSTILE, "t </script><!--<script> __DATA__ & \u2028")
    parser = _Scripts()
    parser.feed(page)
    data_blocks = [text for attrs, text in parser.scripts if attrs.get("id") == "data"]
    assert len(data_blocks) == 1
    block = data_blocks[0]
    doc = json.loads(block)
    assert doc["title"] == "t </script><!--<script> __DATA__ & \u2028"
    assert doc["sections"][0]["tokens"] == HOSTILE and doc["sections"][0]["key_tokens"] == HOSTILE
    # nothing in the block can close it or open a comment/script state: no <, > or &, no raw U+2028/9
    assert not set(block) & {"<", ">", "&", "\u2028", "\u2029"}
    # the page has exactly one closing tag for the data block: the first </script after its opening tag
    start = page.index('<script type="application/json" id="data">') + len('<script type="application/json" id="data">')
    end = page.lower().index("</script", start)
    assert page[start:end] == block
    assert len(re.findall(r"<script\b", page, re.I)) == len(re.findall(r"</script", page, re.I)) == 2
    # the second script (the viewer itself) is intact: it follows the data block's closing tag
    assert parser.scripts[1][1].lstrip().startswith("(function") or "JSON.parse" in parser.scripts[1][1]
    # the page's <title> is the title as text
    assert parser.title == "t </script><!--<script> __DATA__ & \u2028"
    page.encode("utf-8")  # writable as UTF-8 despite the lone surrogate token


def test_a_lone_surrogate_in_the_title_is_replaced_in_the_title_tag_only():
    page = _page(["a", "b"], "x\udc80y")
    page.encode("utf-8")
    parser = _Scripts()
    parser.feed(page)
    assert "\ufffd" in parser.title and "\udc80" not in parser.title
    block = next(text for attrs, text in parser.scripts if attrs.get("id") == "data")
    assert json.loads(block)["title"] == "x\udc80y"  # the data keeps it (JSON.parse reads the escape)
