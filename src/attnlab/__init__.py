"""attnlab: the whole family of attention mechanisms, correct, fast and explainable.

Public names (shape legend: b batch, h heads, q query length, k key length, d features):

* ``attnlab.scores``: dot, scaled_dot, general, additive, concat: (..., q, d), (..., k, d) → (..., q, k)
* ``attnlab.masked_softmax(scores, mask=None, dim=-1)``
* ``attnlab.attention(query, key, value, *, score=..., mask=..., causal=..., need_weights=...)``
* ``attnlab.Mask``: a mask as a value, built once (padding, causal, documents, pattern, dense, bias; & and |)
* ``attnlab.masks``: padding, causal (bottom-right), combine, as_key_mask, score_mask (how modules read short masks)
* ``attnlab.patterns``: sparse patterns (window, strided, global, random, block, top-k) composing with & and |
* ``attnlab.trace()``: record the named steps of the reference path
* ``attnlab.create(name, **kwargs)``: build a registered module (``attnlab.available()`` lists them)

Mask convention everywhere: bool True = may attend; float = additive bias.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names for type checkers; at run time each is imported on first use (below)
    from . import functional, masks, patterns
    from .functional import scores
    from .functional.attention import attention
    from .functional.softmax import masked_softmax
    from .mask import Mask
    from .nn.registry import available, create
    from .trace import Step, Trace, trace

# Public name → the module that defines it (None: the name is that module itself). Importing
# attnlab costs nothing beyond Python: torch is imported when a name is first used, so that
# ``attnlab --help`` answers at once.
_LAZY = {
    "functional": None, "masks": None, "patterns": None,
    "Mask": "mask",
    "scores": "functional", "attention": "functional.attention", "masked_softmax": "functional.softmax",
    "available": "nn.registry", "create": "nn.registry",
    "trace": "trace", "Trace": "trace", "Step": "trace",
}


def __getattr__(name: str):
    if name not in _LAZY and importlib.util.find_spec(f"{__name__}.{name}") is None:
        raise AttributeError(f"module 'attnlab' has no attribute {name!r}")
    where = _LAZY.get(name)
    if where is None:  # a subpackage (attnlab.nn, attnlab.models, ...): imported on first use too
        value = importlib.import_module(f".{name}", __name__)
    else:
        value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value  # the next use is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """``attnlab.trace`` stays the function: importing the submodule ``attnlab.trace`` (which any
    computation does) makes the import system set the package's attribute to the module."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "trace" and isinstance(value, types.ModuleType):
            value = value.trace
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


__version__ = "0.2.0"

__all__ = [
    "Mask",
    "attention",
    "masked_softmax",
    "functional",
    "masks",
    "patterns",
    "scores",
    "trace",
    "Trace",
    "Step",
    "create",
    "available",
    "__version__",
]
