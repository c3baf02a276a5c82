"""Markdown walkthroughs with LaTeX formulas and matrices as ``bmatrix``.

Every formula is display math alone on its line, ``$$ … $$``, so that any Markdown with math
(GitHub, pandoc, MkDocs' arithmatex) reads it; no ``$`` ever sits inside a line of text.

Like the text renderer it formats the trace's recorded steps and the checker's
verdicts; it computes nothing.
"""

from __future__ import annotations

import torch

from ..trace import Trace
from . import i18n
from .examples import Example
from .mechanisms import display_value, head_axis
from .render_text import MARKS, claim_lines, fmt_number, given, header, scalar_text, summary
from .verify import Verdict


def _num(x: float, digits: int) -> str:
    if x in (float("inf"), float("-inf")):
        return r"-\infty" if x < 0 else r"\infty"
    return fmt_number(x, digits)


def latex_array(t: torch.Tensor, digits: int) -> str:
    """A number, a row vector or a matrix in LaTeX (``bmatrix``)."""
    if t.dim() == 0:
        return _num(float(t), digits)
    if t.dim() == 1:
        t = t.unsqueeze(0)
    rows = [" & ".join(_num(float(x), digits) for x in row) for row in t]
    return r"\begin{bmatrix} " + r" \\ ".join(rows) + r" \end{bmatrix}"


def _block(t: torch.Tensor, digits: int, slice_label) -> list[str]:
    if t.dim() <= 2:
        return ["$$" + latex_array(t, digits) + "$$"]
    out = []
    for i, sub in enumerate(t, start=1):
        out.append(f"*{slice_label(i)}*")
        out.append("")
        out.extend(_block(sub, digits, slice_label))
        out.append("")
    return out[:-1]


def _gap(lines: list[str]) -> list[str]:
    """The blank line that starts a new paragraph, unless the last line is one already."""
    return [""] if lines[-1] else []


def _esc(s: str) -> str:
    return s.replace("|", r"\|")


def _given(lang: str, name: str, value: str | None = None) -> str:
    """An input's or parameter's name (and value): code, or in Chinese its label as text (a symbol such
    as ``w_q`` and a library call such as a pattern stay code)."""
    shown = i18n.given(lang, name)
    if shown == name:
        return f"`{name}`" if value is None else f"`{name} = {value}`"
    return shown if value is None else f"{shown} = " + (f"`{value}`" if value.startswith("attnlab.") else value)


def render_markdown(
    ex: Example, t: Trace, checks: list[Verdict] | None = None, digits: int = 4, lang: str = "en"
) -> str:
    head = header(ex, lang)
    lines = [f"# {head[0]}", ""] + [f"{h}  " for h in head[1:]]
    for table in ("inputs", "params"):
        items = [(n, v) for tb, n, v in given(ex) if tb == table]
        if items:
            lines += _gap(lines) + [f"**{i18n.t(lang, table)}**", ""]
        for name, value in items:
            if isinstance(value, torch.Tensor):
                shown = _block(value, 0 if name == "mask" else digits, lambda i: f"[{i}]")
                lines += [_given(lang, name), ""] + shown + [""]
            else:
                lines.append(_given(lang, name, scalar_text(value, lang)) + "  ")
    for n, step in enumerate(t, start=1):
        label = i18n.label(lang, step.name)
        lines += _gap(lines) + ["## " + i18n.t(lang, "md_step", n=n, name=step.name, label=label), ""]
        lines.append(f"$${i18n.latex(lang, step.latex)}$$" if step.latex else f"`{i18n.formula(lang, step.formula)}`")
        if step.note:
            lines += ["", f"*{i18n.note(lang, step.note)}*"]
        lines.append("")
        heads = head_axis(ex, step.name)
        lines += _block(display_value(ex, step.name, step.value), digits,
                        (lambda i: i18n.t(lang, "head", i=i)) if heads else (lambda i: f"[{i}]"))
    if checks:
        lines += _gap(lines) + [f"## {i18n.t(lang, 'claims')}", "", f"| | {i18n.t(lang, 'col_claim')} | attnlab | |", "|---|---|---|---|"]
        for v in checks:
            text, true, notes = claim_lines(v, digits, lang)
            lines.append(f"| {MARKS[v.status]} {i18n.t(lang, v.status)} | {_esc(text)} | {_esc(true)} | {_esc('; '.join(notes))} |")
        lines += ["", summary(checks, lang)]
    return "\n".join(lines) + "\n"


__all__ = ["render_markdown", "latex_array"]
