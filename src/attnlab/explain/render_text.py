"""Plain-text walkthroughs: a trace's steps, in order, with their formulas and numbers.

The renderer only formats what the trace recorded (and what ``verify`` found
for each claim): it computes nothing. ``lang`` is ``"en"`` or ``"zh"``.
"""

from __future__ import annotations

import json
import unicodedata
from decimal import Decimal
from typing import Any

import torch

from ..trace import Trace
from . import i18n
from .examples import Example
from .mechanisms import MECHANISMS, PAPERS, display_value, head_axis
from .verify import CONVENTION, DRIFT, EXACT, OTHER_STEP, WRONG, Verdict


def fmt_number(x: float, digits: int) -> str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    s = f"{x:.{digits}f}"
    return "0." + "0" * digits if s == "-0." + "0" * digits else ("0" if s == "-0" else s)


# An axis longer than LONG (a trained model's 128 features) shows its first HEAD and last TAIL
# entries around "…" (rows: "⋮"), as NumPy summarises, and says how long it is.
LONG, HEAD, TAIL = 16, 6, 2


def _shown(n: int) -> list[int | None]:
    """The indices of an axis of length n to print; None where the elided entries go."""
    return list(range(n)) if n <= LONG else [*range(HEAD), None, *range(n - TAIL, n)]


def fmt_array(t: torch.Tensor, digits: int = 4, indent: str = "  ", slice_label=None) -> str:
    """A 0-d tensor as a number, 1-d as a row, 2-d as an aligned matrix, more as stacked matrices.

    ``slice_label(i)`` names the i-th (1-based) matrix of a 3-d or larger tensor. An axis longer
    than ``LONG`` is summarised (its first and last entries) and its size is written after it.
    """
    if t.dim() == 0:
        return indent + fmt_number(float(t), digits)
    if t.dim() == 1:
        row = "  ".join("…" if j is None else fmt_number(float(t[j]), digits) for j in _shown(len(t)))
        return indent + "[" + row + "]" + (f"  ({len(t)} numbers)" if len(t) > LONG else "")
    if t.dim() == 2:
        cols = _shown(t.shape[1])
        cells = [None if i is None else ["…" if j is None else fmt_number(float(t[i, j]), digits) for j in cols]
                 for i in _shown(t.shape[0])]
        width = max((len(c) for row in cells if row for c in row), default=1)
        lines = ["  ".join(("⋮" if j is not None else " ").rjust(width) for j in cols) if row is None
                 else "  ".join(c.rjust(width) for c in row) for row in cells]
        size = f"{indent}  ({t.shape[0]} × {t.shape[1]})" if max(t.shape) > LONG else None
        return "\n".join([indent + "│ " + line + " │" for line in lines] + ([size] if size else []))
    name = slice_label or (lambda i: f"[{i}]")
    return "\n".join(f"{indent}{name(i + 1)}\n" + fmt_array(sub, digits, indent + "  ") for i, sub in enumerate(t))


def plain(x: Any) -> str:
    """A claimed value as it was written (Decimals keep their digits)."""
    if isinstance(x, list):
        return "[" + ", ".join(plain(y) for y in x) + "]"
    return str(x) if isinstance(x, (Decimal, int, float)) else repr(x)


def fmt_value(x: Any, digits: int) -> str:
    return fmt_array(torch.tensor(x, dtype=torch.float64), digits, indent="").strip()


MARKS = {EXACT: "✓", DRIFT: "≈", CONVENTION: "~", OTHER_STEP: "✗", WRONG: "✗"}


def claim_lines(v: Verdict, digits: int, lang: str) -> tuple[str, str, list[str]]:
    """(what was claimed, the true value, explanations) in words of ``lang``."""
    if v.relation == "argmax":
        text = i18n.t(lang, "claim_argmax", where=v.where(), claimed=v.claimed)
        true = i18n.t(lang, "true_position", pos=v.true, value=fmt_number(v.true_max or 0.0, digits))
    else:
        text = i18n.t(lang, "claim_equal", where=v.where(), claimed=plain(v.claimed))
        true = i18n.t(lang, "true_value", value=fmt_value(v.true, digits))
    notes = []
    if v.status == DRIFT:
        notes.append(i18n.t(lang, "rule", rule=i18n.t(lang, v.rule)))
    if v.status == CONVENTION:
        notes.append(i18n.t(lang, "convention", what=i18n.t(lang, v.rule)))
    if v.status == OTHER_STEP:
        key = f"other:{v.step}<{v.rule}"
        notes.append(i18n.t(lang, key) if i18n.has(lang, key) else i18n.t(
            lang, "other_step", name=v.rule, label=i18n.label(lang, v.rule), formula=v.extra.get("formula", "")))
    if v.status == WRONG:
        if v.follows_from:
            notes.append(i18n.t(lang, "follows", where=v.follows_from))
        elif v.upstream:
            notes.append(i18n.t(lang, "upstream", where=v.upstream))
        if v.own is not None and not v.follows_from and v.own != v.true:
            own = str(v.own) if v.relation == "argmax" else fmt_value(v.own, digits)
            notes.append(i18n.t(lang, "own", value=own))
    return text, true, notes


def summary(verdicts: list[Verdict], lang: str) -> str:
    count = {s: sum(v.status == s for v in verdicts) for s in (EXACT, DRIFT, CONVENTION, OTHER_STEP, WRONG)}
    more = "".join(i18n.t(lang, key, n=count[s]) for s, key in (
        (CONVENTION, "summary_convention"), (OTHER_STEP, "summary_other")) if count[s])
    return i18n.t(lang, "summary_one" if len(verdicts) == 1 else "summary", total=len(verdicts), exact=count[EXACT], drift=count[DRIFT], more=more,
                  wrong=count[WRONG])


def _width(s: str) -> int:
    """Columns a string takes in a terminal: CJK (wide) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def _pad(s: str, width: int) -> str:
    return s + " " * max(0, width - _width(s))


def render_claims(verdicts: list[Verdict], digits: int, lang: str = "en") -> list[str]:
    lines = ["", i18n.t(lang, "claims")]
    shown = {EXACT, DRIFT, WRONG} | {v.status for v in verdicts}
    status_width = max([6] + [_width(i18n.t(lang, s)) for s in shown])
    for v in verdicts:
        text, true, notes = claim_lines(v, digits, lang)
        status = i18n.t(lang, v.status)
        lines.append(f"  {MARKS[v.status]} {_pad(status, status_width)} {_pad(text, 36)} {true}")
        lines.extend(f"           {n}" for n in notes)
    lines.append("  " + summary(verdicts, lang))
    return lines


def header(ex: Example, lang: str) -> list[str]:
    """Title, mechanism, the paper (authors, year, link) and the tokens."""
    lines = [(ex.title_zh if lang == "zh" and ex.title_zh else ex.title) or ex.name]
    lines.append(i18n.t(lang, "mechanism", name=ex.mechanism))
    paper = PAPERS[MECHANISMS[ex.mechanism].paper]
    lines.append(i18n.t(lang, "paper", authors=paper.authors, year=paper.year, url=paper.url))
    if ex.tokens:
        lines.append(i18n.t(lang, "tokens", tokens=" ".join(f"{i + 1}:{tok}" for i, tok in enumerate(ex.tokens))))
    if ex.key_tokens:
        lines.append(i18n.t(lang, "key_tokens", tokens=" ".join(f"{i + 1}:{tok}" for i, tok in enumerate(ex.key_tokens))))
    return lines


def is_array(x: Any) -> bool:
    """A number or a (nested) list of numbers (not a bool, a string or a table)."""
    if isinstance(x, list):
        return bool(x) and all(is_array(y) for y in x)
    return isinstance(x, (int, float, Decimal)) and not isinstance(x, bool)


def _mask_rows(x: Any) -> Any:
    return [_mask_rows(y) for y in x] if isinstance(x, list) else int(bool(x))


def given(ex: Example) -> list[tuple[str, str, Any]]:
    """The example's inputs and parameters as written: (table, name, value), arrays as float64 tensors."""
    out = []
    for table, src in (("inputs", ex.inputs), ("params", ex.params)):
        for name, value in src.items():
            if name == "mask":
                out.append((table, name, torch.tensor(_mask_rows(value), dtype=torch.float64)))
            elif is_array(value) and isinstance(value, list):
                out.append((table, name, torch.tensor(_float_rows(value), dtype=torch.float64)))
            else:
                out.append((table, name, value))
    return out


def _float_rows(x: Any) -> Any:
    return [_float_rows(y) for y in x] if isinstance(x, list) else float(x)


def scalar_text(x: Any) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, (int, float, Decimal)):
        return str(x)
    if isinstance(x, str):
        return x
    return json.dumps(x, default=str, ensure_ascii=False)


def given_lines(ex: Example, digits: int, lang: str) -> list[str]:
    """The inputs and parameters, before the first step."""
    lines: list[str] = []
    for table in ("inputs", "params"):
        items = [(n, v) for t, n, v in given(ex) if t == table]
        if not items:
            continue
        lines += ["", i18n.t(lang, table)]
        for name, value in items:
            if isinstance(value, torch.Tensor):
                d = 0 if name == "mask" else digits
                if value.dim() == 0:
                    lines.append(f"  {name} = {fmt_number(float(value), d)}")
                else:
                    lines += [f"  {name}", fmt_array(value, d, indent="    ")]
            else:
                lines.append(f"  {name} = {scalar_text(value)}")
    return lines


def render(
    ex: Example, t: Trace, checks: list[Verdict] | None = None, digits: int = 4, lang: str = "en"
) -> str:
    lines = header(ex, lang) + given_lines(ex, digits, lang)
    for n, step in enumerate(t, start=1):
        lines.append("")
        lines.append(i18n.t(lang, "step", n=n, name=step.name, label=i18n.label(lang, step.name), formula=step.formula))
        if step.note:
            lines.append(f"  ({i18n.note(lang, step.note)})")
        heads = head_axis(ex, step.name)
        lines.append(fmt_array(display_value(ex, step.name, step.value), digits,
                               slice_label=(lambda i: i18n.t(lang, "head", i=i)) if heads else None))
    if checks:
        lines.extend(render_claims(checks, digits, lang))
    return "\n".join(lines) + "\n"


__all__ = ["render", "header", "given", "given_lines", "fmt_array", "fmt_number", "render_claims", "summary", "claim_lines", "plain"]
