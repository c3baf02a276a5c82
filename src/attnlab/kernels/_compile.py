"""``torch.compiler`` decorators without importing the compiler at import time.

``torch.compiler.assume_constant_result`` and ``torch.compiler.disable`` import the compiler
(``torch._dynamo``, about 2 s) the moment they decorate, so a program that never compiles would
pay for it on ``import attnlab``. Here:

* ``assume_constant(fn)`` marks ``fn`` as ``assume_constant_result`` does (that decorator only
  sets this marker; a test checks that the two still agree, and the conformance tests compile
  with ``fullgraph=True`` and zero graph breaks);
* ``when_compiling(torch.compiler.disable)`` applies the decorator at the first call made while
  ``torch.compile`` traces (the compiler is loaded then anyway); an eager call runs ``fn`` as
  written, which is what ``disable`` does eagerly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


_CONSTANT_MARK = "_dynamo_marked_constant"  # what torch.compiler.assume_constant_result sets


def assume_constant(fn: F) -> F:
    """``torch.compiler.assume_constant_result(fn)``: under ``torch.compile`` a constant of the graph."""
    setattr(fn, _CONSTANT_MARK, True)
    return fn


def when_compiling(decorator: Callable[[F], Callable[..., Any]]) -> Callable[[F], F]:
    """``@when_compiling(torch.compiler.disable)``: ``decorator`` applied at the first traced call."""

    def wrap(fn: F) -> F:
        made: list[Callable[..., Any]] = []

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not torch.compiler.is_compiling():
                return fn(*args, **kwargs)
            if not made:
                made.append(decorator(fn))
            return made[0](*args, **kwargs)

        return call  # type: ignore[return-value]

    return wrap


__all__ = ["assume_constant", "when_compiling"]
