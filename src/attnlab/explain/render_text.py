"""Plain-text walkthroughs: a trace's steps, in order, with their formulas and numbers.

The renderer only formats what the trace recorded: it computes nothing.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import torch

from ..trace import Trace
from .claims import ClaimCheck
from .examples import Example, display_value


def fmt_number(x: float, digits: int) -> str:
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    s = f"{x:.{digits}f}"
    return "0." + "0" * digits if s == "-0." + "0" * digits else s


def fmt_array(t: torch.Tensor, digits: int = 4, indent: str = "  ") -> str:
    """A 0-d tensor as a number, 1-d as a row, 2-d as an aligned matrix, more as stacked matrices."""
    if t.dim() == 0:
        return indent + fmt_number(float(t), digits)
    if t.dim() == 1:
        return indent + "[" + "  ".join(fmt_number(float(x), digits) for x in t) + "]"
    if t.dim() == 2:
        cells = [[fmt_number(float(x), digits) for x in row] for row in t]
        width = max((len(c) for row in cells for c in row), default=1)
        lines = ["  ".join(c.rjust(width) for c in row) for row in cells]
        return "\n".join(indent + "│ " + line + " │" for line in lines)
    return "\n".join(f"{indent}[{i + 1}]\n" + fmt_array(sub, digits, indent + "  ") for i, sub in enumerate(t))


def _plain(x: Any) -> str:
    """A claimed value as it was written (Decimals keep their digits)."""
    if isinstance(x, list):
        return "[" + ", ".join(_plain(y) for y in x) + "]"
    return str(x) if isinstance(x, (Decimal, int, float)) else repr(x)


def render_claims(checks: list[ClaimCheck], digits: int) -> list[str]:
    lines = ["", "Claims written in the example, checked against attnlab:"]
    for c in checks:
        if c.relation == "argmax":
            text = f"largest weight of {c.where()} at position {c.claimed}"
            got = f"attnlab: position {c.computed}"
        else:
            text = f"{c.where()} = {_plain(c.claimed)}"
            comp = torch.tensor(c.computed, dtype=torch.float64)
            got = "attnlab: " + fmt_array(comp, digits, indent="").strip()
        mark = "✓ agrees " if c.ok else "✗ WRONG  "
        lines.append(f"  {mark} {text:<40} {got}")
    wrong = sum(not c.ok for c in checks)
    lines.append(f"  {len(checks) - wrong} of {len(checks)} claims agree at their written precision; {wrong} do not.")
    return lines


def render(ex: Example, t: Trace, checks: list[ClaimCheck] | None = None, digits: int = 4) -> str:
    lines = [ex.title or ex.name]
    if ex.source:
        lines.append(f"(from {ex.source})")
    lines.append(f"mechanism: {ex.mechanism}")
    if ex.tokens:
        lines.append("tokens: " + " ".join(f"{i + 1}:{tok}" for i, tok in enumerate(ex.tokens)))
    for n, step in enumerate(t, start=1):
        lines.append("")
        lines.append(f"Step {n}. {step.name}: {step.formula}")
        if step.note:
            lines.append(f"  ({step.note})")
        lines.append(fmt_array(display_value(ex, step.name, step.value), digits))
    if checks:
        lines.extend(render_claims(checks, digits))
    return "\n".join(lines) + "\n"


__all__ = ["render", "fmt_array", "fmt_number"]
