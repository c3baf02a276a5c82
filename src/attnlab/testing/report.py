"""What ``check`` found: a ``Report`` of ``Failure``s (each with the smallest input that shows it,
printable as a reproducer) and the names of the cases that passed."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

HUNG = "did not return within the time limit"  # the rule of a case whose call hung


def _literal(t: torch.Tensor, grad: bool = False) -> str:
    """Python source that rebuilds ``t`` exactly (every float dtype's values are exact in a Python float)."""
    strided = t.dim() == 4 and t.numel() > 1 and not t.is_contiguous() and t.transpose(1, 2).is_contiguous()
    values = t.transpose(1, 2) if strided else t
    text = f"torch.tensor({values.tolist()!r}, dtype={t.dtype}, device={str(t.device)!r})"
    if strided:
        text += ".transpose(1, 2)"  # the same non-contiguous view the checker passed
    if t.numel() == 0:
        text = f"torch.empty({tuple(t.shape)}, dtype={t.dtype}, device={str(t.device)!r})"
    return text + (".requires_grad_()" if grad else "")


def _function_import(fn) -> str:
    mod, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not mod or mod == "__main__" or not name or "<" in name or "." in name:
        return "# fn = ...  # define your attention function here\n"
    return f'if "fn" not in globals():\n    from {mod} import {name} as fn\n'


@dataclass
class Failure:
    """A broken rule: ``case`` ("masked NaN value [float32, cpu]"), ``rule`` in plain words, ``message``
    (the rule with its numbers), and the smallest input that shows it (``reproducer()``)."""

    case: str
    rule: str
    message: str
    inputs: dict  # q, k, v, allow, causal, argument, scale, grad, judge (the case's name for the rules)
    signature: str
    argument_name: str
    function: object = field(repr=False, default=None)

    def shape(self) -> str:
        b, h, n, d = self.inputs["q"].shape
        return f"b={b} h={h} q={n} k={self.inputs['k'].shape[-2]} d={d}"

    def reproducer(self) -> str:
        """Python source that rebuilds the tensors, calls ``fn`` and raises the same ``AssertionError``."""
        i = self.inputs
        arg = i["argument"]
        arg_src = _literal(arg) if isinstance(arg, torch.Tensor) else repr(arg)
        allow = "None" if i["allow"] is None else _literal(i["allow"])
        return (
            f"# {self.case}: {self.message}\n"
            f"# signature {self.signature!r}; smallest input: {self.shape()}\n"
            "import torch\nfrom attnlab.testing import judge\n"
            + _function_import(self.function)
            + 'nan, inf = float("nan"), float("inf")\n'
            + "".join(f"{n} = {_literal(i[n], i['grad'])}\n" for n in "qkv")
            + f"{self.argument_name} = {arg_src}\n"
            + "".join(f"{name} = fn(q, k, v, {self.argument_name})\n"
                      f"{name} = {name}[0] if isinstance({name}, (tuple, list)) else {name}\n"
                      for name in (("out", "again") if i["twice"] else ("out",)))
            + f"judge({i['judge']!r}, out, q, k, v, allow={allow}, causal={i['causal']!r}, "
            f"scale={i['scale']!r}, grad={i['grad']!r}{', again=again' if i['twice'] else ''})\n"
        )

    def __str__(self) -> str:
        return f"FAIL {self.case}: {self.message}  [smallest input: {self.shape()}]"


@dataclass
class Report:
    """``ok`` when nothing failed; ``failures`` (``Failure``), ``passed``, ``skipped`` and ``not_run``
    (case names; skipped: the signature cannot express the case's mask; not run: the function hung in
    an earlier case, which failed)."""

    function: str
    signature: str
    failures: list[Failure] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    hung: bool = False  # a call did not return within the time limit: the cases after it are not run

    @property
    def ok(self) -> bool:
        return not self.failures

    def rules(self) -> list[str]:
        """The distinct rules broken, in the order found."""
        return list(dict.fromkeys(f.rule for f in self.failures))

    def __str__(self) -> str:
        head = (f"{self.function} (signature {self.signature!r}): "
                f"{'conforms' if self.ok else f'{len(self.failures)} failed'}, {len(self.passed)} passed")
        lines = [head] + [f"  {f}" for f in self.failures]
        if self.passed:
            lines.append("  passed: " + ", ".join(self.passed))
        if self.skipped:
            lines.append("  not expressible in this signature: " + ", ".join(self.skipped))
        if self.not_run:
            lines.append("  not run (the function hung in an earlier case): " + ", ".join(self.not_run))
        if self.failures:
            lines.append("  (failure.reproducer() returns Python source that rebuilds the smallest input)")
        return "\n".join(lines)


__all__ = ["HUNG", "Failure", "Report"]
