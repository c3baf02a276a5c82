"""Checking a written claim against the library's trace.

A claim ``value = 1.32`` is *written* to two decimals, so it agrees with the
computed value v when |v − 1.32| ≤ 0.005 (half a unit in its last place).
``relation = "argmax"`` claims the 1-based position of a row's largest entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import torch

from ..trace import Trace
from .examples import Example, ExampleError, display_value


@dataclass
class ClaimCheck:
    step: str
    index: tuple[int, ...]
    relation: str
    claimed: Any  # a number, nested list of numbers, or a 1-based position
    computed: Any  # the same, from the trace
    ok: bool

    def where(self) -> str:
        return self.step + ("[" + ", ".join(map(str, self.index)) + "]" if self.index else "")


def decimals(x: Any) -> int:
    """Decimal places a number was written with (integers: 0)."""
    if isinstance(x, Decimal):
        exp = x.as_tuple().exponent
        return max(0, -exp) if isinstance(exp, int) else 0
    return 0


def _flat(x: Any) -> list:
    return [y for z in x for y in _flat(z)] if isinstance(x, list) else [x]


def select(ex: Example, t: Trace, step: str, index: list[int]) -> torch.Tensor:
    if step not in t:
        raise ExampleError(f"{ex.name}: claim on unknown step {step!r}; this mechanism's steps: {t.names()}")
    value = display_value(ex, step, t[step].value)
    for n, i in enumerate(index):
        if not isinstance(i, int) or isinstance(i, bool) or i < 1:
            raise ExampleError(f"{ex.name}: claim on {step}: index entries are 1-based integers; got {index}")
        if value.dim() == 0 or i > value.shape[0]:
            raise ExampleError(
                f"{ex.name}: claim on {step}: index {index} is out of range for shape "
                f"{tuple(display_value(ex, step, t[step].value).shape)} (at position {n + 1})"
            )
        value = value[i - 1]
    return value


def check(ex: Example, t: Trace, claim: dict) -> ClaimCheck:
    for key in ("step", "value"):
        if key not in claim:
            raise ExampleError(f"{ex.name}: a [[claim]] is missing {key!r}: {claim}")
    step, index = str(claim["step"]), list(claim.get("index", []))
    relation = str(claim.get("relation", "equal"))
    value = select(ex, t, step, index)
    claimed = claim["value"]
    if relation == "argmax":
        if value.dim() != 1:
            raise ExampleError(f"{ex.name}: an argmax claim needs one row; {step}{index} has shape {tuple(value.shape)}")
        computed = int(torch.argmax(value)) + 1
        return ClaimCheck(step, tuple(index), relation, claimed, computed, computed == int(claimed))
    if relation != "equal":
        raise ExampleError(f"{ex.name}: unknown relation {relation!r} (use 'equal' or 'argmax')")
    got = value.tolist()
    flat_c, flat_g = _flat(claimed), _flat(got)
    if len(flat_c) != len(flat_g):
        raise ExampleError(
            f"{ex.name}: claim on {step}{index or ''} has {len(flat_c)} numbers, the step has {len(flat_g)}"
        )
    ok = all(abs(float(c) - g) <= 0.5 * 10 ** (-decimals(c)) + 1e-12 for c, g in zip(flat_c, flat_g))
    return ClaimCheck(step, tuple(index), relation, claimed, got, ok)


def check_all(ex: Example, t: Trace) -> list[ClaimCheck]:
    return [check(ex, t, c) for c in ex.claims]


__all__ = ["ClaimCheck", "check", "check_all", "decimals"]
