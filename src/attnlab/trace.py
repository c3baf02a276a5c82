"""Step traces: the named intermediate results of the reference path.

Every number that ``attnlab explain``, ``attnlab verify`` and ``attnlab.viz``
show comes from here: the reference path of each mechanism *records* its steps
(scores, scaled scores, masked scores, weights, context, ...) while a trace is
active, and the renderers only *read* them. Nothing is kept on modules.

    >>> import torch, attnlab
    >>> q, k = torch.randn(1, 2, 4), torch.randn(1, 3, 4)
    >>> with attnlab.trace() as t:
    ...     out, _ = attnlab.attention(q, k, k)
    >>> t.names()
    ['scores', 'scaled_scores', 'weights', 'context']

While a trace is active, ``attnlab.attention`` always takes the reference path
(the fused kernel has no intermediates to show). Under ``torch.compile`` the
trace is a no-op (``active()`` is False, ``record`` does nothing) and the
ContextVar is never read, so compiled graphs have no break here.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Step:
    """One recorded step.

    name:    a stable identifier (``"scores"``, ``"weights"``, ...), used by
             worked-example files to address the step.
    formula: the formula in plain Unicode, e.g. ``"α = softmax(e)"``.
    value:   the tensor, detached and copied when it was recorded.
    latex:   the same formula in LaTeX (for Markdown output), or ``""``.
    note:    free text, e.g. how many scores a mask removed.
    """

    name: str
    formula: str
    value: torch.Tensor
    latex: str = ""
    note: str = ""


@dataclass
class Trace:
    """An ordered list of steps; ``trace[name]`` gives the last step of that name."""

    steps: list[Step] = field(default_factory=list)

    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def __getitem__(self, name: str) -> Step:
        for step in reversed(self.steps):
            if step.name == name:
                return step
        raise KeyError(f"no step named {name!r} in this trace; recorded steps: {self.names()}")

    def __contains__(self, name: object) -> bool:
        return any(s.name == name for s in self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


_ACTIVE: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("attnlab_trace", default=None)


@contextlib.contextmanager
def trace() -> Iterator[Trace]:
    """Record the steps of every attnlab computation run inside the block."""
    t = Trace()
    token = _ACTIVE.set(t)
    try:
        yield t
    finally:
        _ACTIVE.reset(token)


_compiling = torch.compiler.is_compiling  # (one lookup at import: it runs on every recorded step)


def active() -> bool:
    """True while a trace is recording (always False while ``torch.compile`` traces: no graph break)."""
    if _compiling():
        return False
    return _ACTIVE.get() is not None


def record(name: str, formula: str, value: torch.Tensor, *, latex: str = "", note: str = "") -> None:
    """Append a step to the active trace (a no-op when none is active, and while compiling)."""
    if _compiling():
        return
    t = _ACTIVE.get()
    if t is not None:
        t.steps.append(Step(name, formula, value.detach().clone(), latex, note))


__all__ = ["Step", "Trace", "trace", "active", "record"]
