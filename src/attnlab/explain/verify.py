"""The worked-example checker: every claim is exact, rounding drift, another convention, another step, or wrong.

A claim is a number (or an array, or a 1-based argmax position) written in a
worked example for one step of the mechanism. ``verify(ex)`` recomputes the
example with the library and classifies each claim. The rules, precisely:

**Written precision.** A number written with d decimals (``0.57``: d = 2,
``2``: d = 0) *agrees with* a value x when |number − x| ≤ ½·10⁻ᵈ (x rounds to
it, ties either way). An array agrees when every number agrees with its entry.
An argmax claim agrees when the row's largest entry is at the claimed position.

**exact**: the claim agrees with the true value (the library's float64 trace).

**rounding drift**: not exact, but a *hand computation* that follows the
example's own rounding agrees with it. The hand computations recompute the
claim's step from the inputs, step by step, with the functional layer's own
step functions (``attnlab.functional.steps``: each recorded step's function,
fed the earlier steps' values; ``attnlab.explain.recompute`` only picks the
mechanism's path), in three variants:

  (a) *own values*: every entry of an earlier step that an earlier exact or
      drift claim gives is replaced by the number as written (the first tutorial:
      score₁ = 1.0 × 0.40 + 2.0 × 0.57 = 1.54 from the written tanh values,
      where the exact score is 1.527);
  (b) *written to working precision*: as (a), and every other entry of every
      earlier step is rounded half-up to the example's working precision P,
      the most decimals any of its claims has (the first tutorial: tanh(h₃ …) written as
      [0.21, 0.34] gives score₃ = 0.89 where the exact score is 0.880);
  (c) *double rounding*: the true value, or a value from (a) or (b), rounded
      half-up first to d + 1 decimals and then to d (the first tutorial: tanh(0.64) =
      0.5649 → 0.565 → 0.57, where one rounding gives 0.56).

Steps are taken in the order of the trace, claims on one step in file order;
"earlier" means on a step before the claim's step. Claims that are wrong are
never substituted in (a) and (b): an error is not drift.

**wrong**: everything else. The check reports the true value and, from a
hand computation (a) that substitutes *all* earlier claims, wrong ones too:

  * ``follows_from``: set when that computation agrees with the claim, i.e.
    the arithmetic is right but starts from an earlier wrong claim; it names
    the earliest wrong claim whose value changes this one;
  * ``upstream``: the earliest wrong claim whose value changes this one
    (whether or not the arithmetic from it is right); ``own`` is the value the
    example's own earlier claims give.

**another convention** (``CONVENTION``): not exact and no drift, but the claim
is the true value (or a hand computation's) written another common way; the
verdict names which (``rule``):

  * ``truncated``, ``rounded up``, ``rounded down``: cut off at the written
    precision instead of rounded (8.48 for 8.4853; 0.57 for 0.561 rounded up);
    every number agrees either by rounding or by that mode, and every number
    that needs the mode is written with at least two decimals (cut at 0 or 1
    decimals, a plain error matches too often);
  * ``percent``: attention weights written as percentages (47.7 for 0.477);
  * ``0-based index``: the claim's index counted from 0 (``index = [1]``
    for the second entry; not for argmax positions, where one place off is
    the commonest plain error);
  * ``transposed``: a matrix written transposed.

Truncated and rounded-up/-down claims are the example's own values and are
substituted like drift in (a) and (b); the others are not.

**another step** (``OTHER_STEP``): the claim is the value of a different step
at the same place (``rule`` names it): e.g. raw scores qᵀk written as the
scaled scores (before ÷√d). The claim is still false for its own step.

**wrong**: everything else. ``upstream`` / ``follows_from`` (below) name an
earlier wrong (or other-step) claim only when substituting it *changes this
claim at its written precision* (an argmax: its position): an argmax that a
wrong value cannot move is not "after the wrong value".

``attnlab verify`` exits with 0 only when no claim is wrong or another step's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import torch

from ..functional.steps import evaluate
from ..trace import Trace
from .examples import Example, ExampleError
from .mechanisms import display_value, path_for, run

EXACT, DRIFT, WRONG = "exact", "rounding drift", "wrong"
CONVENTION, OTHER_STEP = "another convention", "another step"
STATUSES = (EXACT, DRIFT, CONVENTION, OTHER_STEP, WRONG)
ROUNDING_MODES = ("truncated", "rounded up", "rounded down")
MIN_CUT_DECIMALS = 2  # a number cut at 0 or 1 decimals is too often a plain error that happens to match


@dataclass
class Verdict:
    """One claim, checked."""

    n: int  # its position in the file (0-based)
    step: str
    index: tuple[int, ...]
    relation: str  # "equal" or "argmax"
    claimed: Any  # number, nested list, or a 1-based position
    true: Any  # the library's value (nested lists), or the true position
    status: str  # one of STATUSES
    rule: str = ""  # drift: "own values", ...; convention: "truncated", ...; another step: its name
    own: Any = None  # the value from the example's own earlier claims (wrong claims)
    follows_from: str = ""  # "scores[2]": the arithmetic is right from this wrong claim
    upstream: str = ""  # the earliest wrong claim that changes this one
    true_max: float | None = None  # argmax claims: the largest weight
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status not in (WRONG, OTHER_STEP)

    def where(self) -> str:
        return self.step + ("[" + ", ".join(map(str, self.index)) + "]" if self.index else "")


def decimals(x: Any) -> int:
    """Decimal places a number was written with (integers: 0; a float built in code, such as a claim a
    command writes, as many as its shortest repr: 0.8242 has 4)."""
    if isinstance(x, float) and math.isfinite(x):
        x = Decimal(repr(x))
    if isinstance(x, Decimal):
        exp = x.as_tuple().exponent
        return max(0, -exp) if isinstance(exp, int) else 0
    return 0


def _flat(x: Any) -> list:
    if isinstance(x, torch.Tensor):
        return x.reshape(-1).tolist()
    return [y for z in x for y in _flat(z)] if isinstance(x, list) else [x]


def _agrees_one(c: Any, x: float, double: bool) -> bool:
    d = decimals(c)
    if not math.isfinite(x):
        return False
    if abs(float(c) - x) <= 0.5 * 10 ** (-d) + 1e-12:
        return True
    if double:
        step1 = Decimal(repr(x)).quantize(Decimal(1).scaleb(-(d + 1)), rounding=ROUND_HALF_UP)
        step2 = step1.quantize(Decimal(1).scaleb(-d), rounding=ROUND_HALF_UP)
        return step2 == Decimal(c).quantize(Decimal(1).scaleb(-d), rounding=ROUND_HALF_UP)
    return False


_MODES = {"truncated": "ROUND_DOWN", "rounded up": "ROUND_CEILING", "rounded down": "ROUND_FLOOR"}


def _cut_one(c: Any, x: float, mode: str) -> bool:
    """``c`` is x rounded (any tie) or cut off by ``mode`` at c's written precision."""
    if _agrees_one(c, x, False):
        return True
    if not math.isfinite(x) or decimals(c) < MIN_CUT_DECIMALS:
        return False
    q = Decimal(1).scaleb(-decimals(c))
    return Decimal(repr(x)).quantize(q, rounding=_MODES[mode]) == Decimal(c).quantize(q)


def cut(mode: str, claimed: Any, value: torch.Tensor) -> bool:
    """Every number of the claim is the value rounded, or cut off by ``mode``, at its written precision."""
    cs, xs = _flat(claimed), _flat(value)
    return len(cs) == len(xs) and all(_cut_one(c, x, mode) for c, x in zip(cs, xs))


def changes(relation: str, claimed: Any, base: torch.Tensor, alt: torch.Tensor) -> bool:
    """``alt`` differs from ``base`` where a claim can see it: at its written precision, or its argmax."""
    if relation == "argmax":
        return int(torch.argmax(base)) != int(torch.argmax(alt))
    cs, bs, as_ = _flat(claimed), _flat(base), _flat(alt)
    for c, b, a in zip(cs, bs, as_):
        if not (math.isfinite(a) and math.isfinite(b)):
            if not (a == b or (a != a and b != b)):
                return True
            continue
        q = Decimal(1).scaleb(-decimals(c))
        if Decimal(repr(b)).quantize(q, rounding=ROUND_HALF_UP) != Decimal(repr(a)).quantize(q, rounding=ROUND_HALF_UP):
            return True
    return False


def agrees(relation: str, claimed: Any, value: torch.Tensor, *, double: bool = False) -> bool:
    if relation == "argmax":
        return int(torch.argmax(value)) + 1 == int(claimed)
    cs, xs = _flat(claimed), _flat(value)
    return len(cs) == len(xs) and all(_agrees_one(c, x, double) for c, x in zip(cs, xs))


def _round(t: torch.Tensor, p: int) -> torch.Tensor:
    s = 10.0**p
    finite = torch.isfinite(t)
    return torch.where(finite, torch.floor(t * s + 0.5 + 1e-9) / s, t)


def select(ex: Example, step: str, value: torch.Tensor, index: list[int], where: str = "") -> torch.Tensor:
    """The claimed part of a step's (display) value: a view, so it can be written to."""
    v = display_value(ex, step, value)
    for pos, i in enumerate(index):
        if v.dim() == 0 or i > v.shape[0]:
            raise ExampleError(
                f"{where or ex.name}: claim on {step}: index {index} is out of range for shape "
                f"{tuple(display_value(ex, step, value).shape)} (at position {pos + 1})"
            )
        v = v[i - 1]
    return v


@dataclass
class _Claim:
    n: int
    step: str
    pos: int  # position of its step in the trace
    index: list[int]
    relation: str
    value: Any

    def where(self) -> str:
        return self.step + ("[" + ", ".join(map(str, self.index)) + "]" if self.index else "")


def _claims(ex: Example, t: Trace) -> list[_Claim]:
    out = []
    names = t.names()
    for n, c in enumerate(ex.claims):
        where = ex.at("claim", nth=n)
        if not isinstance(c, dict):
            raise ExampleError(f"{where}: each [[claim]] must be a table")
        for key in ("step", "value"):
            if key not in c:
                raise ExampleError(f"{where}: missing {key!r}")
        step = str(c["step"])
        if step not in t:
            raise ExampleError(f"{where}: unknown step {step!r}; this mechanism's steps: {', '.join(names)}")
        index = c.get("index", [])
        if not isinstance(index, list) or any(not isinstance(i, int) or isinstance(i, bool) or i < 1 for i in index):
            raise ExampleError(f"{where}: index must be a list of 1-based integers, e.g. [2]; got {index!r}")
        relation = str(c.get("relation", "equal"))
        if relation not in ("equal", "argmax"):
            raise ExampleError(f"{where}: unknown relation {relation!r} (use 'equal' or 'argmax')")
        pos = len(names) - 1 - names[::-1].index(step)
        claim = _Claim(n, step, pos, index, relation, c["value"])
        part = select(ex, step, t[step].value, index, where)
        if relation == "argmax":
            if part.dim() != 1:
                raise ExampleError(f"{where}: an argmax claim needs one row; {claim.where()} has shape {tuple(part.shape)}")
            if isinstance(claim.value, bool) or not isinstance(claim.value, int) or not 1 <= claim.value <= part.shape[0]:
                raise ExampleError(f"{where}: an argmax value is a 1-based position in 1..{part.shape[0]}; got {claim.value!r}")
        else:
            try:
                flat = _flat(claim.value)
                [float(x) for x in flat]
            except (TypeError, ValueError):
                raise ExampleError(f"{where}: value must be a number or a list of numbers; got {claim.value!r}") from None
            if len(flat) != part.numel():
                raise ExampleError(
                    f"{where}: {claim.where()} has {part.numel()} number(s) (shape {tuple(part.shape)}); "
                    f"the claim writes {len(flat)}"
                )
        out.append(claim)
    return sorted(out, key=lambda c: (c.pos, c.n))


def _hand(ex: Example, t: Trace, upto: int, subs: list[_Claim], round_to: int | None) -> torch.Tensor:
    """Recompute step ``upto`` of the trace from earlier steps, with substitutions and rounding."""
    env, path = path_for(ex)
    env = dict(env)
    for i, step in enumerate(t.steps[: upto + 1]):
        value = evaluate(path, env, step.name) if step.name in path else step.value.clone()
        if i < upto:
            value = value.clone()
            if round_to is not None:
                value = _round(value, round_to)
            for c in subs:
                if c.pos == i and c.relation == "equal":
                    part = select(ex, c.step, value, c.index)
                    part.copy_(torch.tensor([float(x) for x in _flat(c.value)], dtype=value.dtype).reshape(part.shape))
        env[step.name] = value
    return env[t.steps[upto].name]


def _working_precision(ex: Example) -> int:
    return max((decimals(x) for c in ex.claims if isinstance(c, dict) for x in _flat(c.get("value", 0))), default=0)


def _shifted(ex: Example, t: Trace, c: _Claim) -> torch.Tensor | None:
    """The claimed part one place further along every index (the claim's index read as 0-based)."""
    if not c.index:
        return None
    try:
        return select(ex, c.step, t[c.step].value, [i + 1 for i in c.index])
    except ExampleError:
        return None


def _convention(ex: Example, t: Trace, c: _Claim, true: torch.Tensor, hands: list[torch.Tensor]) -> str:
    """The other common convention the claim follows, or ""."""
    if c.relation == "argmax":  # an argmax one place off is the commonest plain error: never a convention
        return ""
    for mode in ROUNDING_MODES:
        if any(cut(mode, c.value, h) for h in [true, *hands]):
            return mode
    if c.step == "weights" and agrees("equal", c.value, true * 100):
        return "percent"
    moved = _shifted(ex, t, c)
    if moved is not None and agrees("equal", c.value, moved):
        return "0-based index"
    if true.dim() == 2 and true.shape[0] > 1 and true.shape[1] > 1 and agrees("equal", c.value, true.T):
        return "transposed"
    return ""


def _other_step(ex: Example, t: Trace, c: _Claim) -> str:
    """The name of another recorded step whose value at the same place is the claim, or ""."""
    shape = display_value(ex, c.step, t[c.step].value).shape
    for name in dict.fromkeys(t.names()):
        if name == c.step:
            continue
        value = t[name].value
        if display_value(ex, name, value).shape != shape:
            continue
        if agrees(c.relation, c.value, select(ex, name, value, c.index)):
            return name
    return ""


def verify(ex: Example, t: Trace | None = None) -> list[Verdict]:
    """Classify every claim of ``ex`` (in step order): exact, drift, another convention, another step or wrong."""
    t = run(ex) if t is None else t
    claims = _claims(ex, t)
    p = _working_precision(ex)
    done: list[tuple[_Claim, Verdict]] = []
    for c in claims:
        true = select(ex, c.step, t[c.step].value, c.index)
        earlier = [(d, v) for d, v in done if d.pos < c.pos]
        ok_subs = [d for d, v in earlier if v.status in (EXACT, DRIFT) or v.rule in ROUNDING_MODES]
        wrong_subs = [d for d, v in earlier if not v.ok]
        verdict = Verdict(
            c.n, c.step, tuple(c.index), c.relation, c.value,
            int(torch.argmax(true)) + 1 if c.relation == "argmax" else true.tolist(), EXACT,
        )
        if c.relation == "argmax":
            verdict.true_max = float(true.max())
        if not agrees(c.relation, c.value, true):
            hands = {
                "own values": _hand(ex, t, c.pos, ok_subs, None),
                "working precision": _hand(ex, t, c.pos, ok_subs, p),
            }
            parts = {k: select(ex, c.step, h, c.index) for k, h in hands.items()}
            rule = next((k for k, h in parts.items() if agrees(c.relation, c.value, h)), "")
            if not rule and c.relation == "equal":
                cands = {"double rounding": true, **parts}
                rule = "double rounding" if any(agrees("equal", c.value, h, double=True) for h in cands.values()) else ""
            if rule:
                verdict.status, verdict.rule = DRIFT, rule
            elif conv := _convention(ex, t, c, true, list(parts.values())):
                verdict.status, verdict.rule = CONVENTION, conv
            elif other := _other_step(ex, t, c):
                verdict.status, verdict.rule = OTHER_STEP, other
                verdict.extra["formula"] = t[other].formula
            else:
                verdict.status = WRONG
                base = parts["own values"]
                own = select(ex, c.step, _hand(ex, t, c.pos, ok_subs + wrong_subs, None), c.index)
                verdict.own = int(torch.argmax(own)) + 1 if c.relation == "argmax" else own.tolist()
                for w in sorted(wrong_subs, key=lambda d: (d.pos, d.n)):
                    alt = select(ex, c.step, _hand(ex, t, c.pos, ok_subs + [w], None), c.index)
                    if changes(c.relation, c.value, base, alt):
                        verdict.upstream = w.where()
                        break
                if verdict.upstream and agrees(c.relation, c.value, own):
                    verdict.follows_from = verdict.upstream
        done.append((c, verdict))
    return [v for _, v in done]


def all_ok(verdicts: list[Verdict]) -> bool:
    return all(v.ok for v in verdicts)


__all__ = [
    "Verdict", "verify", "agrees", "cut", "changes", "decimals", "all_ok",
    "EXACT", "DRIFT", "CONVENTION", "OTHER_STEP", "WRONG", "STATUSES", "ROUNDING_MODES",
]
