"""The one signature of the context-parallel attentions:

    f(q, k, v, *, causal=False, pattern=None, mask=None, scale=None, group=None, layout="contiguous")

``ring_attention`` and ``ulysses_attention`` take these options, and ``context_parallel_attention``
takes them with its ``mode``. They are the fields of ``ShardedCall``, written here once;
``context_parallel`` makes the public function from an implementation ``impl(q, k, v, call)``: the
keyword options become one ``ShardedCall`` (an unknown keyword is a ``TypeError`` that names the
ones taken), and the function's signature (``inspect.signature``, ``help``) is the one above.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from ..patterns import Pattern
from .layout import check_shards

R = TypeVar("R")


@dataclass(frozen=True)
class ShardedCall:
    """How this rank's shards q, k (b, h, n/W, d) and v (b, h, n/W, d_v) of one sequence attend."""

    causal: bool = False  # each position attends itself and earlier positions (global positions)
    pattern: Pattern | None = None  # an attnlab.patterns pattern over the global positions (∩ causal)
    mask: torch.Tensor | None = None  # bool (b, n/W), True = may attend (a real key), over this rank's keys
    scale: float | None = None  # None: 1/√d
    group: Any = None  # the process group (None: the default one)
    layout: str = "contiguous"  # how the sequence was sharded (attnlab.distributed.shard)

    @classmethod
    def of(cls, name: str, options: dict[str, Any]) -> ShardedCall:
        """The call of ``name(q, k, v, **options)``; a keyword that is not a field is a ``TypeError``."""
        for key in options:
            if key not in OPTIONS:
                raise TypeError(f"{name}() got an unexpected keyword argument '{key}'; it takes q, k, v and "
                                + ", ".join(f"{f}=" for f in OPTIONS))
        return cls(**options)

    def check(self, q: object, k: object, v: object) -> float | None:
        """The entry checks (``layout.check_shards``) → the scale (None: 1/√d)."""
        return check_shards(q, k, v, self.mask, self.scale, self.pattern, self.layout)

    def options(self) -> dict[str, Any]:
        """The fields by name (the tensors themselves, not copies)."""
        return {name: getattr(self, name) for name in OPTIONS}


OPTIONS = tuple(f.name for f in dataclasses.fields(ShardedCall))


def signature(*extra: inspect.Parameter) -> inspect.Signature:
    """``(q, k, v, *, <extra>, <ShardedCall's fields with their defaults>)``."""
    qkv = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("q", "k", "v")]
    options = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
               for f in dataclasses.fields(ShardedCall)]
    return inspect.Signature([*qkv, *extra, *options])


def context_parallel(impl: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, ShardedCall], R]) -> Callable[..., R]:
    """The public form of ``impl(q, k, v, call)``: called as ``f(q, k, v, **options)`` (see the module docstring)."""

    def entry(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options: Any) -> R:
        return impl(q, k, v, ShardedCall.of(impl.__name__, options))

    entry.__name__, entry.__qualname__, entry.__module__ = impl.__name__, impl.__qualname__, impl.__module__
    entry.__doc__ = impl.__doc__
    entry.__signature__ = signature()  # type: ignore[attr-defined]
    return entry


__all__ = ["ShardedCall", "context_parallel", "signature", "OPTIONS"]
