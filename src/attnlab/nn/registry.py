"""The registry: ``attnlab.create("name", **kwargs)`` builds a registered module.

Each module file registers its classes with ``@register("name")``; importing
``attnlab.nn`` imports every module file, and Python runs a package's
``__init__`` before any module in it, so the registry is complete as soon as
this module can be reached (no import back up into ``attnlab.nn``: no cycle). ``available()`` lists the names (the smoke tests
iterate over it).

Names are spelled one way: lower case, words joined by hyphens (``multi-head``,
``scaled-dot``, ``luong-general``). ``canonical(name)`` is the one place other spellings
are read: an underscore is read as a hyphen (``multi_head`` → ``multi-head``, as the worked
examples of ``attnlab explain`` used to write them), then the table ``ALIASES`` maps the
other names of a registered mechanism to it (``additive`` → ``bahdanau``). ``attnlab explain``
reads mechanism names through the same function, so every spelling works in both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

_REGISTRY: dict[str, Callable[..., torch.nn.Module]] = {}
_ModuleClass = TypeVar("_ModuleClass", bound=type[torch.nn.Module])

# another name (hyphen spelling) → registered name: the only place an alias is defined
ALIASES: dict[str, str] = {
    "additive": "bahdanau",
    "general": "luong-general",
    "concat": "luong-concat",
    "cross-attention": "cross",
    "latent": "mla",
    "neighborhood": "neighborhood-2d",
}


def canonical(name: str) -> str:
    """The one spelling of ``name``: ``"multi_head"`` → ``"multi-head"``, ``"additive"`` → ``"bahdanau"``.

    Names that are neither registered nor aliases come back with hyphens (``self_attention`` →
    ``self-attention``); ``create`` refuses those it does not know.
    """
    if not isinstance(name, str):
        raise TypeError(f"an attention name must be a str; got {type(name).__name__}")
    hyphens = name.replace("_", "-")
    return ALIASES.get(hyphens, hyphens)


def register(name: str, **defaults: Any) -> Callable[[_ModuleClass], _ModuleClass]:
    """Class decorator: ``@register("luong-dot", score="dot")`` registers a name with default kwargs."""

    if name != name.lower() or "_" in name or name in ALIASES:
        raise ValueError(f"registered names are lower case with hyphens (not {name!r}); put old spellings in ALIASES")

    def deco(cls: _ModuleClass) -> _ModuleClass:
        if name in _REGISTRY:
            raise ValueError(f"attention name {name!r} is registered twice")
        _REGISTRY[name] = (lambda **kw: cls(**{**defaults, **kw})) if defaults else cls
        return cls

    return deco


def create(name: str, **kwargs: Any) -> torch.nn.Module:
    """Build the module registered under ``name`` with ``kwargs``."""
    if canonical(name) not in _REGISTRY:
        raise ValueError(f"unknown attention {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[canonical(name)](**kwargs)


def available() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


__all__ = ["register", "create", "available", "canonical", "ALIASES"]
