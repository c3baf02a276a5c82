"""MkDocs hooks: worked examples are computed at build time, so no number in the docs can drift.

A page line ``<!-- walkthrough: EXAMPLE MECHANISM LANG -->`` is replaced by the output of
``attnlab explain MECHANISM --example EXAMPLE --format markdown --lang LANG`` (headings
moved one level down), computed by the installed attnlab while the site builds.
"""

from __future__ import annotations

import contextlib
import io
import re

MARKER = re.compile(r"^<!-- walkthrough: (\S+) (\S+) (en|zh) -->$", re.M)


def walkthrough(example: str, mechanism: str, lang: str) -> str:
    from attnlab.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["explain", mechanism, "--example", example, "--format", "markdown", "--lang", lang])
    if code not in (0, 1):  # 1: the example holds a wrong claim, which the walkthrough marks
        raise RuntimeError(f"attnlab explain {mechanism} --example {example} exited {code}")
    return re.sub(r"^(#+) ", r"\1# ", out.getvalue(), flags=re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (the hook's signature)
    return MARKER.sub(lambda m: walkthrough(*m.groups()), markdown)
