"""The registry: ``attnlab.create("name", **kwargs)`` builds a registered module.

Each module file registers its classes with ``@register("name")``; importing
``attnlab.nn`` imports every module file, and Python runs a package's
``__init__`` before any module in it, so the registry is complete as soon as
this module can be reached (no import back up into ``attnlab.nn``: no cycle). ``available()`` lists the names (the smoke tests
iterate over it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_REGISTRY: dict[str, Callable[..., torch.nn.Module]] = {}


def register(name: str, **defaults: Any) -> Callable:
    """Class decorator: ``@register("luong-dot", score="dot")`` registers a name with default kwargs."""

    def deco(cls):
        if name in _REGISTRY:
            raise ValueError(f"attention name {name!r} is registered twice")
        _REGISTRY[name] = (lambda **kw: cls(**{**defaults, **kw})) if defaults else cls
        return cls

    return deco


def create(name: str, **kwargs: Any) -> torch.nn.Module:
    """Build the module registered under ``name`` with ``kwargs``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown attention {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](**kwargs)


def available() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


__all__ = ["register", "create", "available"]
