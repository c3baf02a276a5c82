"""MkDocs hooks: worked examples are computed at build time, so no number in the docs can drift.

A page line ``<!-- walkthrough: EXAMPLE MECHANISM LANG -->`` is replaced by the output of
``attnlab explain MECHANISM --example EXAMPLE --format markdown --lang LANG`` (headings
moved one level down), computed by the installed attnlab while the site builds. A line
``<!-- attnlab: ARGS -->`` is replaced by ``attnlab ARGS`` and what it prints, as a text block
(the model cards of the shipped models, a real decoder step of the trained translator).

Math is rendered at build time too: every formula that arithmatex marks (``$…$``, ``$$…$$``) becomes
MathML, which browsers draw natively, so the pages need no script and no network to show it.
"""

from __future__ import annotations

import contextlib
import html
import io
import re

MARKER = re.compile(r"^<!-- walkthrough: (\S+) (\S+) (en|zh) -->$", re.M)
COMMAND = re.compile(r"^<!-- attnlab: (.+?) -->$", re.M)
# What pymdownx.arithmatex (generic: true) writes: inline \(…\) in a span, display \[…\] in a div.
ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
DELIMITERS = {"span": (r"\(", r"\)"), "div": (r"\[", r"\]")}
UNKNOWN_COMMAND = re.compile(r">(\\[A-Za-z]+)")


def walkthrough(example: str, mechanism: str, lang: str) -> str:
    from attnlab.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["explain", mechanism, "--example", example, "--format", "markdown", "--lang", lang])
    if code not in (0, 1):  # 1: the example holds a wrong claim, which the walkthrough marks
        raise RuntimeError(f"attnlab explain {mechanism} --example {example} exited {code}")
    return re.sub(r"^(#+) ", r"\1# ", out.getvalue(), flags=re.M)


def command(args: str) -> str:
    """``attnlab ARGS`` and its output, as a fenced text block; a failing command fails the build."""
    import shlex

    from attnlab.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(shlex.split(args))
    if code != 0:
        raise RuntimeError(f"attnlab {args} exited {code}")
    return f"```text\n$ attnlab {args}\n{out.getvalue().rstrip()}\n```"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (the hook's signature)
    markdown = COMMAND.sub(lambda m: command(m.group(1)), markdown)
    return MARKER.sub(lambda m: walkthrough(*m.groups()), markdown)


def mathml(tag: str, escaped_tex: str, where: str) -> str:
    """One arithmatex element (``span`` inline, ``div`` display) as a MathML ``<math>`` element."""
    from latex2mathml.converter import convert

    tex = html.unescape(escaped_tex).strip()
    start, end = DELIMITERS[tag]
    if tex.startswith(start) and tex.endswith(end):
        tex = tex[len(start):-len(end)]
    try:
        out = convert(tex, display="block" if tag == "div" else "inline")
    except Exception as e:  # noqa: BLE001 (latex2mathml raises several kinds; the build must name the formula)
        raise ValueError(f"{where}: cannot render the formula {tex!r} as MathML: {e}") from e
    unknown = UNKNOWN_COMMAND.search(out)
    if unknown:  # latex2mathml keeps a command it does not know as text: the reader would see it raw
        raise ValueError(f"{where}: the formula {tex!r} uses {unknown.group(1)}, which MathML rendering does not know")
    return out


def on_page_content(content: str, page, config, files) -> str:  # noqa: ARG001 (the hook's signature)
    where = page.file.src_uri if page is not None else "page"
    return ARITHMATEX.sub(lambda m: mathml(m.group(1), m.group(2), where), content)
