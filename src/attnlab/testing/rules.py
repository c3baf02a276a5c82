"""The rules, each written once: ``judge(case, out, q, k, v, ...)`` raises ``RuleBroken`` naming the
first rule the output (and its gradients) breaks, in plain words. ``check`` calls it after each call
of the function under test, and every reproducer ends with the same call.

The budget of a comparison depends on the inputs' dtype: |got - want| ≤ budget · (1 + |want|), with
want the float64 reference (``attnlab.testing.reference``); gradients get ten times the budget.
"""

from __future__ import annotations

import torch

from .reference import ALIGNMENTS, allowed, reference

BUDGET = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}

# What each dirty case plants at the masked positions, as the failure names it.
PLANTED = {"masked NaN value": "NaN in a masked value", "masked inf key": "inf in a masked key",
           "local window": "NaN in a key outside every window", "random row masks": "NaN in a key no row may attend",
           "causal": "a NaN in a future key"}
# The cases whose alignment is named when the output matches the other one.
ALIGNED = ("causal alignment (q < k)", "causal alignment (q > k)")


class RuleBroken(AssertionError):
    """``rule``: the rule in plain words (stable, for grouping); ``str``: the rule with its numbers."""

    def __init__(self, rule: str, detail: str = ""):
        super().__init__(rule + detail)
        self.rule = rule


def _far(got: torch.Tensor, want: torch.Tensor, budget: float) -> str | None:
    """``": max |error| 3.1e-01 at (0, 1, 2, 0)"`` when ``got`` leaves the budget around ``want``."""
    err = (got.detach().to(torch.float64) - want.detach().to(torch.float64)).abs()
    excess = err.nan_to_num(torch.inf) - budget * (1 + want.detach().to(torch.float64).abs())
    if not excess.numel() or bool((excess <= 0).all()):
        return None
    at = tuple(int(i) for i in torch.unravel_index(excess.argmax(), excess.shape))
    return f": max |error| {float(err.nan_to_num(torch.inf, torch.inf).max()):.1e} at {at}"


# The rules below are public: attnlab's own conformance suite calls the same definitions on its
# mechanisms (comparing a run with planted NaN/inf against a clean run of the same mechanism).

def close(got: torch.Tensor, want: torch.Tensor, budget: float, rule: str = "differs from the reference") -> None:
    """|got - want| ≤ budget · (1 + |want|) everywhere (NaN never is), else ``RuleBroken(rule)``."""
    far = _far(got, want, budget)
    if far:
        raise RuleBroken(rule, far)


def untouched(planted: str, where: str, got: torch.Tensor, clean: torch.Tensor | None = None,
              atol: float = 0.0) -> None:
    """``got``, computed with ``planted`` ("NaN in a masked value") at positions that must not matter,
    is finite and, given ``clean`` (the same computation without it), within ``atol`` of it."""
    got = got.detach()
    if not bool(torch.isfinite(got).all()):
        raise RuleBroken(f"{planted} reached {where}")
    if clean is not None:
        if got.shape != clean.shape:
            raise RuleBroken(f"{planted} changed the shape of {where}", f": {tuple(got.shape)}, clean {tuple(clean.shape)}")
        diff = (got.to(torch.float64) - clean.detach().to(torch.float64)).abs().nan_to_num(torch.inf, torch.inf)
        if diff.numel() and float(diff.max()) > atol:
            raise RuleBroken(f"{planted} changed {where}", f": max |difference| {float(diff.max()):.1e}")


def rows_zero(out: torch.Tensor, rows: torch.Tensor | None = None, what: str = "a fully masked row") -> None:
    """The rows of ``out`` that ``rows`` selects (bool over its leading axes; ``None``: all of ``out``)
    are exact zeros."""
    sel = out.detach() if rows is None else out.detach()[rows]
    if not bool(torch.isfinite(sel).all()):
        raise RuleBroken(f"{what} gives NaN" if bool(sel.isnan().any()) else f"{what} is not finite")
    if bool((sel != 0).any()):
        raise RuleBroken(f"{what} is not zero", f": max |value| {float(sel.abs().max()):.1e}")


def finite_gradients(grads: dict[str, torch.Tensor], case: str | None = None) -> None:
    """Every gradient is finite; the rule broken is named after ``case`` (what was planted, or the
    fully masked row)."""
    for name, g in grads.items():
        if g is None or bool(torch.isfinite(g).all()):
            continue
        if case in PLANTED:
            raise RuleBroken(f"{PLANTED[case]} reached the gradient of {name}")
        if case == "fully masked row":
            raise RuleBroken("a fully masked row gives non-finite gradients", f" (of {name})")
        raise RuleBroken(f"the gradient of {name} is not finite")


def has_shape(out, shape: tuple[int, ...]) -> None:
    """``out`` is a tensor of ``shape``."""
    if not isinstance(out, torch.Tensor):
        raise RuleBroken("the output is not a tensor", f": got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise RuleBroken("the output has the wrong shape", f": {tuple(out.shape)}, expected {tuple(shape)}")


def _grads(out, q, k, v, cot):
    leaves = [t for t in (q, k, v) if t.requires_grad]
    got = torch.autograd.grad(out, leaves, cot, allow_unused=True, retain_graph=False)
    return {name: (g if g is not None else torch.zeros_like(t))
            for name, t, g in zip("qkv", leaves, got)}


def _cotangent(out: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.device)


def _judge_output(case, out, want, ok, seen, budget):
    """The output rules; ``seen`` (b, h, q): the rows that may attend a planted NaN, which are not judged."""
    planted = PLANTED.get(case, "a NaN or inf in a key or value")
    rows = ~ok.any(-1)  # (b, h, q): rows that see nothing
    if bool(seen.any()):
        untouched(planted, "an earlier row" if case == "causal" else "a row that may not attend it", out[~seen])
        keep = ~seen[..., None]
        out = torch.where(keep, out.detach().to(torch.float64), 0.0)
        want = torch.where(keep, want.detach(), 0.0)
    elif case in PLANTED:
        untouched(planted, "the output", out[~rows])
    if bool(rows.any()):
        rows_zero(out, rows)
    close(out, want, budget)


def _judge_gradients(case, out, want, q, k, v, leaves, seen, budget):
    """The gradient rules for a random cotangent, zero on the ``seen`` rows (b, h, q); when there are
    such rows, only the gradient of q on the other rows is defined, and judged."""
    cot = torch.where(seen[..., None], 0.0, _cotangent(out))
    got = _grads(out, q, k, v, cot.to(out.dtype))
    ref = _grads(want, *leaves, cot)
    if bool(seen.any()):
        if "q" not in got:
            return
        planted = PLANTED.get(case, "a NaN or inf in a key or value")
        where = "an earlier row" if case == "causal" else "a row that may not attend it"
        g, r = got["q"][~seen], ref["q"][~seen]
        if not bool(torch.isfinite(g).all()):
            raise RuleBroken(f"{planted} reached the gradient of q at {where}")
        close(g, r, 10 * budget, "the gradient of q differs from the reference")
        return
    finite_gradients(got, case)
    for name, g in got.items():
        close(g, ref[name], 10 * budget, f"the gradient of {name} differs from the reference")


def judge(case: str, out, q, k, v, *, allow=None, causal=False, scale=None, grad=True, again=None) -> None:
    """Raise ``RuleBroken`` if ``out = fn(q, k, v, <mask>)`` breaks a rule of ``case``.

    ``allow``/``causal`` describe the mask in attnlab's polarity (see ``attnlab.testing.signatures``);
    ``grad``: also check the gradients of q, k, v (those that require grad) for a random cotangent;
    ``again``: the output of a second call on the same inputs, which must equal ``out`` bit for bit.
    A row that may attend a key or value holding NaN or inf (a causal row that sees the planted
    future key) is not judged, and its cotangent is zero.
    """
    b, h, n, _ = q.shape
    want_shape = (b, h, n, v.shape[-1])
    has_shape(out, want_shape)
    if out.dtype != q.dtype:
        raise RuleBroken("the output's dtype differs from the input's", f": {out.dtype}, expected {q.dtype}")
    if again is not None:  # the determinism case: only that
        if not torch.equal(out.detach(), again.detach()):
            diff = (out.detach().double() - again.detach().double()).abs().nan_to_num(torch.inf, torch.inf).max()
            raise RuleBroken("two calls on the same input give different outputs", f": max |difference| {float(diff):.1e}")
        return
    budget = BUDGET.get(q.dtype, 3e-2)
    ok = allowed(allow, causal, (b, h, n, k.shape[-2]), q.device)
    leaves = [t.detach().requires_grad_(t.requires_grad) for t in (q, k, v)]
    want = reference(*leaves, allow, causal=causal, scale=scale)
    if case == "mask polarity":
        if _far(out, want, budget) and not _far(out, reference(q, k, v, ~ok, scale=scale), budget):
            raise RuleBroken("mask polarity looks inverted")
    if case in ALIGNED:
        other = next(a for a in ALIGNMENTS if a != causal)
        if _far(out, want, budget) and not _far(out, reference(q, k, v, allow, causal=other, scale=scale), budget):
            raise RuleBroken(f"the causal mask looks {other.replace('_', '-')} aligned", f" (declared {causal!r})")
    dirty = ~(torch.isfinite(k.detach()).all(-1) & torch.isfinite(v.detach()).all(-1))  # (b, h, k)
    if case == "causal" and dirty.shape[-1]:
        dirty[..., -1] = True  # where the case plants its NaN: the rows that may see it are never judged
    seen = (ok & dirty[..., None, :]).any(-1)  # (b, h, q): rows that may attend a NaN or inf
    _judge_output(case, out, want, ok, seen, budget)
    if not grad or case == "mask polarity" or not out.numel():
        return
    if not out.requires_grad:
        raise RuleBroken("the output carries no gradient", " (pass grad=False to check outputs only)")
    _judge_gradients(case, out, want, q, k, v, leaves, seen, budget)

__all__ = ["BUDGET", "RuleBroken", "close", "finite_gradients", "has_shape", "judge", "rows_zero", "untouched"]
