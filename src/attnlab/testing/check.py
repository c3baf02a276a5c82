"""``check(fn)``: run every case of the contract on ``fn``, for each dtype and device, and report."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .cases import CASES, LADDER, Case, Setup
from .reference import causal_pairs
from .report import Failure, Report
from .rules import RuleBroken, judge
from .signatures import NotExpressible, Signature
from .signatures import signature as _signature


def _layout(t: torch.Tensor, strided: bool) -> torch.Tensor:
    """``t`` with the same values, as a non-contiguous view when ``strided``."""
    return t.transpose(1, 2).contiguous().transpose(1, 2) if strided else t


@dataclass(frozen=True)
class _Run:
    """What stays fixed while the cases run: the function, how it is called, dtype and device."""

    fn: Callable
    sig: Signature
    dtype: torch.dtype
    device: str | torch.device
    grad: bool
    scale: float | None
    alignment: str  # the causal alignment the caller declared

    def trial(self, case: Case, shape, seed: int):
        """Run ``case`` once at ``shape``: ``None`` if it passed, else (rule, message, inputs).
        Raises ``NotExpressible`` when the signature cannot say the case's mask."""
        s = case.build(shape, torch.Generator().manual_seed(seed), self.sig.pairs)
        return self.attempt(case.name, s, case.twice)

    def attempt(self, name: str, s: Setup, twice: bool = False):
        """Call the function on the input ``s`` and judge it by the rules of the case ``name``: ``None``
        if it passed, else (rule, message, inputs). ``NotExpressible`` as ``trial``."""
        s.causal = self.alignment if s.causal else False
        q, k, v = (_layout(t.to(dtype=self.dtype, device=self.device), s.strided).requires_grad_(self.grad)
                   for t in (s.q, s.k, s.v))
        arg = self.sig.encode(s.allow, s.causal, (*q.shape[:3], k.shape[-2]), self.dtype, self.device)
        inputs = {"q": q, "k": k, "v": v, "allow": s.allow, "causal": s.causal, "argument": arg,
                  "scale": self.scale, "grad": self.grad, "judge": name, "twice": twice}
        try:
            out = self.sig.call(self.fn, q, k, v, arg)
            again = self.sig.call(self.fn, q, k, v, arg) if twice else None
            judge(name, out, q, k, v, allow=s.allow, causal=s.causal, scale=self.scale, grad=self.grad,
                  again=again)
        except RuleBroken as e:
            return e.rule, str(e), inputs
        except Exception as e:  # the function under test raised: that is its answer to this input
            return f"raised {type(e).__name__}", f"raised {type(e).__name__}: {e}", inputs
        return None

    def smallest(self, case: Case, seed: int):
        """The first (smallest) shape of the ladder that breaks the rule the largest breaks; ``None``
        if the largest passes."""
        shapes = LADDER if case.ladder else LADDER[-1:]
        found = self.trial(case, shapes[-1], seed)
        if found is None:
            return None
        for shape in shapes[:-1]:
            small = self.trial(case, shape, seed)
            if small is not None and small[0] == found[0]:
                return small
        return found


def check(fn: Callable, *, signature: str = "qkv_mask", dtypes: Sequence[torch.dtype] = (torch.float32,),
          devices: Sequence[str | torch.device] = ("cpu",), grad: bool = True, seed: int = 0,
          scale: float | None = None, causal: str = "top_left", examples: int = 0) -> Report:
    """Check ``fn`` against attnlab's attention contract; return a ``Report``.

    Args:
        fn: the attention function, called as ``signature`` says (see ``attnlab.testing.signatures``).
        signature: how ``fn`` takes its mask: ``"qkv_mask"`` (bool, True = may attend),
            ``"qkv_torch_mask"`` (True = masked out), ``"qkv_bias"`` (additive, -inf forbids),
            ``"qkv_padding"`` ((b, k), True = real key) or ``"qkv_causal"`` (``is_causal``).
        dtypes: the input dtypes to try; half precision is held to a looser budget.
        devices: the devices to try (``"cpu"``, ``"cuda"``).
        grad: also check the gradients of q, k and v.
        seed: the seed of every random input.
        scale: the factor on q·k that ``fn`` applies; default 1/√d.
        causal: how ``fn`` aligns a causal mask when q ≠ k: ``"top_left"`` (key ≤ query, as
            ``scaled_dot_product_attention``) or ``"bottom_right"`` (the last query sees every key,
            as ``attnlab.attention``). Only the ``"qkv_causal"`` signature's function builds its own.
        examples: also try this many generated inputs (``attnlab.testing.generate``: random shapes
            with zero lengths, masks, NaN/inf at unattended keys) for each dtype and device, and report
            the first failure shrunk to the smallest input; needs ``hypothesis``. 0: none.
    """
    sig = _signature(signature)
    causal_pairs(1, 1, causal)  # an unknown alignment is a ValueError now, not a failure of every case
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    report = Report(function=name, signature=signature)
    for device in devices:
        for dtype in dtypes:
            tag = f"[{str(dtype).removeprefix('torch.')}, {device}]"
            run = _Run(fn, sig, dtype, device, grad, scale, causal)
            for i, case in enumerate(CASES):
                label = f"{case.name} {tag}"
                try:
                    found = run.smallest(case, seed + i)
                except NotExpressible:
                    report.skipped.append(label)
                    continue
                _record(report, label, found, sig, fn)
            if examples:
                from .generate import smallest_failure
                found = smallest_failure(run.attempt, signature, examples, seed)
                _record(report, f"generated inputs ({examples} examples) {tag}", found, sig, fn)
    return report


def _record(report: Report, label: str, found, sig: Signature, fn: Callable) -> None:
    if found is None:
        report.passed.append(label)
    else:
        rule, message, inputs = found
        report.failures.append(Failure(label, rule, message, inputs, sig.name, sig.argument, fn))


def assert_conforms(fn: Callable, **kwargs) -> Report:
    """``check(fn, **kwargs)``; raise ``AssertionError`` with the report when a rule is broken."""
    report = check(fn, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report


__all__ = ["assert_conforms", "check"]
