"""A walkthrough as plain data (for ``--format json`` and the viewer).

``document(ex, trace, verdicts)`` lists each step with its name, label,
formula, LaTeX, note, shape and numbers as the example writes them (the
library's float64 values, unrounded), then each claim's verdict. Only reads.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import torch

from ..trace import Trace
from . import i18n
from .examples import Example
from .mechanisms import MECHANISMS, PAPERS, display_value, head_axis
from .render_text import given, plain, scalar_text, summary
from .verify import Verdict


def _json_numbers(x: Any) -> Any:
    """Nested lists with ±inf as the strings "inf"/"-inf" and NaN as null (valid JSON)."""
    if isinstance(x, list):
        return [_json_numbers(y) for y in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None if x != x else ("inf" if x > 0 else "-inf")
    return x


def _given(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _json_numbers(x.tolist())
    return json.loads(scalar_text(x)) if isinstance(x, (list, dict)) else (float(x) if isinstance(x, Decimal) else x)


def _claimed(x: Any) -> Any:
    if isinstance(x, list):
        return [_claimed(y) for y in x]
    return x if isinstance(x, (int, bool)) else plain(x)


def document(ex: Example, t: Trace, checks: list[Verdict] | None = None, lang: str = "en") -> dict:
    steps = []
    for step in t:
        value = display_value(ex, step.name, step.value)
        steps.append({
            "name": step.name,
            "label": i18n.label(lang, step.name),
            "formula": step.formula,
            "latex": step.latex,
            "note": i18n.note(lang, step.note) if step.note else "",
            "shape": list(value.shape),
            "head_axis": head_axis(ex, step.name),
            "value": _json_numbers(value.to(torch.float64).tolist()),
        })
    doc: dict[str, Any] = {
        "example": ex.name,
        "title": (ex.title_zh if lang == "zh" and ex.title_zh else ex.title) or ex.name,
        "source": ex.source,
        "mechanism": ex.mechanism,
        "paper": vars(PAPERS[MECHANISMS[ex.mechanism].paper]),
        "inputs": {n: _given(v) for tb, n, v in given(ex) if tb == "inputs"},
        "params": {n: _given(v) for tb, n, v in given(ex) if tb == "params"},
        "tokens": ex.tokens,
        "key_tokens": ex.key_tokens,
        "steps": steps,
    }
    if checks is not None:
        doc["claims"] = [
            {
                "step": v.step, "index": list(v.index), "relation": v.relation,
                "claimed": _claimed(v.claimed), "true": _json_numbers(v.true), "status": v.status,
                "rule": v.rule, "own": _json_numbers(v.own), "follows_from": v.follows_from,
                "upstream": v.upstream,
            }
            for v in checks
        ]
        doc["summary"] = summary(checks, lang)
        doc["ok"] = all(v.ok for v in checks)
    return doc


__all__ = ["document"]
