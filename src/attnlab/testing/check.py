"""``check(fn)``: run every case of the contract on ``fn``, for each dtype and device, and report.

Each call of ``fn`` (with its backward and the rules) runs in a separate daemon thread that the
checker waits on for at most ``timeout`` seconds: a function that hangs is reported as failing the
case it hung in, and the cases after it are not run (the thread cannot be stopped from outside; it is
left behind and ends with the process). ``sys.exit`` or ``SystemExit`` in ``fn`` is a failure like
any other exception; ``os._exit`` ends the process and cannot be caught.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .arguments import validated
from .cases import CASES, LADDER, Case, Setup
from .report import HUNG, Failure, Report
from .rules import RuleBroken, judge
from .signatures import NotExpressible, Signature


class _Hung(Exception):
    """The call did not return within the time limit."""


def _within(seconds: float | None, work: Callable):
    """``work()``, run in a daemon thread with the caller's grad mode; raise ``_Hung`` if it has not
    returned after ``seconds`` (``None``: run it here, without a limit). Whatever it raises
    (``SystemExit`` included) is raised here."""
    if seconds is None:
        return work()
    box: dict = {}
    grad_mode = torch.is_grad_enabled()

    def target():
        try:
            with torch.set_grad_enabled(grad_mode):
                box["result"] = work()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="attnlab.testing.check", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise _Hung
    if "error" in box:
        raise box["error"]
    return box.get("result")


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
    timeout: float | None = None  # seconds per call; None: no limit

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

        def call_and_judge():
            with torch.cuda.device(q.device) if q.is_cuda else contextlib.nullcontext():  # per thread
                out = self.sig.call(self.fn, q, k, v, arg)
                again = self.sig.call(self.fn, q, k, v, arg) if twice else None
                judge(name, out, q, k, v, allow=s.allow, causal=s.causal, scale=self.scale, grad=self.grad,
                      again=again)
        try:
            _within(self.timeout, call_and_judge)
        except RuleBroken as e:
            return e.rule, str(e), inputs
        except _Hung:
            return HUNG, f"{HUNG} ({self.timeout:g} s per case); the cases after it were not run", inputs
        except KeyboardInterrupt:
            raise
        except SystemExit as e:  # the function under test tried to end the process
            return "raised SystemExit", f"raised SystemExit (sys.exit({e.code!r})): the function tried to exit", inputs
        except BaseException as e:  # the function under test raised: that is its answer to this input
            return f"raised {type(e).__name__}", f"raised {type(e).__name__}: {e}", inputs
        return None

    def smallest(self, case: Case, seed: int):
        """The first (smallest) shape of the ladder that breaks the rule the largest breaks; ``None``
        if the largest passes. A hang is returned at once, not shrunk (each try could hang again)."""
        shapes = LADDER if case.ladder else LADDER[-1:]
        found = self.trial(case, shapes[-1], seed)
        if found is None or found[0] == HUNG:
            return found
        for shape in shapes[:-1]:
            small = self.trial(case, shape, seed)
            if small is not None and small[0] in (found[0], HUNG):
                return small
        return found


def check(fn: Callable, *, signature: str = "qkv_mask", dtypes: Sequence[torch.dtype] = (torch.float32,),
          devices: Sequence[str | torch.device] = ("cpu",), grad: bool = True, seed: int = 0,
          scale: float | None = None, causal: str = "top_left", examples: int = 0,
          cases: Sequence[str] | None = None, timeout: float | None = 120.0) -> Report:
    """Check ``fn`` against attnlab's attention contract; return a ``Report``.

    Args:
        fn: the attention function, called as ``signature`` says (see ``attnlab.testing.signatures``).
        signature: how ``fn`` takes its mask: ``"qkv_mask"`` (bool, True = may attend),
            ``"qkv_torch_mask"`` (True = masked out), ``"qkv_bias"`` (additive, -inf forbids),
            ``"qkv_padding"`` ((b, k), True = real key) or ``"qkv_causal"`` (``is_causal``).
        dtypes: the input dtypes to try (float32, float64, float16, bfloat16); half precision is held
            to a looser budget.
        devices: the devices to try (``"cpu"``, ``"cuda"``, ``"mps"``); each must be available.
        grad: also check the gradients of q, k and v.
        seed: the seed of every random input, from 0 to 2**32 - 1.
        scale: the factor on q·k that ``fn`` applies; default 1/√d.
        causal: how ``fn`` aligns a causal mask when q ≠ k: ``"top_left"`` (key ≤ query, as
            ``scaled_dot_product_attention``) or ``"bottom_right"`` (the last query sees every key,
            as ``attnlab.attention``). Only the ``"qkv_causal"`` signature's function builds its own.
        examples: also try this many generated inputs (``attnlab.testing.generate``: random shapes
            with zero lengths, masks, NaN/inf at unattended keys) for each dtype and device, and report
            the first failure shrunk to the smallest input; needs ``hypothesis``. 0: none.
        cases: the names of the cases to run (``attnlab.testing.cases.CASES``); default every one.
        timeout: the seconds one call of ``fn`` (with its backward) may take before the case fails as
            hung and the remaining cases are not run; ``None``: no limit, and ``fn`` runs in the
            caller's thread.

    Bad arguments raise ``ValueError`` or ``TypeError`` naming the argument, before ``fn`` is called;
    so does a run that would try nothing (no dtype, no device, no case).
    """
    sig, dtypes, devices, selected = validated(fn, signature, dtypes, devices, grad, seed, scale, causal,
                                               examples, cases, timeout)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    report = Report(function=name, signature=signature)
    for device in devices:
        for dtype in dtypes:
            tag = f"[{str(dtype).removeprefix('torch.')}, {device}]"
            run = _Run(fn, sig, dtype, device, grad, scale, causal, timeout)
            for i, case in enumerate(CASES):
                if case.name in selected:
                    _run_case(report, run, case, f"{case.name} {tag}", seed + i)
            if examples:
                _run_generated(report, run, f"generated inputs ({examples} examples) {tag}", examples, seed)
    if not report.passed and not report.failures:
        raise ValueError(f"no case ran: the signature {signature!r} cannot express the mask of any case in "
                         f"cases={list(selected)!r}; choose cases it can express or another signature")
    return report


def _run_case(report: Report, run: _Run, case: Case, label: str, seed: int) -> None:
    if report.hung:
        report.not_run.append(label)
        return
    try:
        found = run.smallest(case, seed)
    except NotExpressible:
        report.skipped.append(label)
        return
    _record(report, label, found, run.sig, run.fn)


def _run_generated(report: Report, run: _Run, label: str, examples: int, seed: int) -> None:
    if report.hung:
        report.not_run.append(label)
        return
    from .generate import smallest_failure
    _record(report, label, smallest_failure(run.attempt, run.sig.name, examples, seed), run.sig, run.fn)


def _record(report: Report, label: str, found, sig: Signature, fn: Callable) -> None:
    if found is None:
        report.passed.append(label)
    else:
        rule, message, inputs = found
        report.failures.append(Failure(label, rule, message, inputs, sig.name, sig.argument, fn))
        report.hung = report.hung or rule == HUNG


def assert_conforms(fn: Callable, **kwargs) -> Report:
    """``check(fn, **kwargs)``; raise ``AssertionError`` with the report when a rule is broken."""
    report = check(fn, **kwargs)
    if not report.ok:
        raise AssertionError(str(report))
    return report


__all__ = ["assert_conforms", "check"]
