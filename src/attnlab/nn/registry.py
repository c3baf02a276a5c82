"""The registry: ``attnlab.create("name", **kwargs)`` builds a registered module.

A mechanism is one record (``Record``) written beside its code: each module file registers
its class with ``@register("name", aliases=(...), functional=...)``, which says the name, its
other spellings, the module and its functional form. Everything that lists mechanisms is read
from the records: ``create``, ``available``, the alias table ``ALIASES``, and (in
``attnlab.explain``, which adds each mechanism's walkthrough beside its runner) the worked
examples' names, their JSON Schema and ``verify``'s recomputation.

Importing ``attnlab.nn`` imports every module file, and Python runs a package's ``__init__``
before any module in it, so the registry is complete as soon as this module can be reached (no
import back up into ``attnlab.nn``: no cycle). ``available()`` lists the names (the smoke tests
iterate over it).

Names are spelled one way: lower case, words joined by hyphens (``multi-head``,
``scaled-dot``, ``luong-general``). ``canonical(name)`` is the one place other spellings
are read: an underscore is read as a hyphen (``multi_head`` → ``multi-head``), then
``ALIASES`` (filled from the records' ``aliases``) maps the other names of a registered
mechanism to it. ``attnlab explain`` reads mechanism names through the same function, so every
spelling works in both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

_ModuleClass = TypeVar("_ModuleClass", bound=type[torch.nn.Module])

# what a module can take (the contract suite, tests/conformance, checks each record's claim):
# mask: a padding or attention mask; causal: causal=True; weights: need_weights=True; cache: a key/value cache
SUPPORTS = ("mask", "causal", "weights", "cache")


@dataclass(frozen=True)
class Record:
    """One registered mechanism.

    name: its one spelling; aliases: its other names (each read as ``name`` everywhere);
    module: the class ``create`` builds, with ``defaults`` under the caller's keywords;
    functional: its pure function in ``attnlab.functional`` (None where the module is only a
    composition of others, e.g. a block); supports: what its call takes, words of ``SUPPORTS``.
    """

    name: str
    module: type[torch.nn.Module]
    aliases: tuple[str, ...] = ()
    functional: Callable[..., Any] | None = None
    defaults: tuple[tuple[str, Any], ...] = ()
    supports: frozenset[str] = frozenset()

    def build(self, **kwargs: Any) -> torch.nn.Module:
        """The module with the registered defaults, the caller's keywords winning."""
        return self.module(**{**dict(self.defaults), **kwargs})


RECORDS: dict[str, Record] = {}
# another name (hyphen spelling) → registered name; filled only by ``register`` from the records
ALIASES: dict[str, str] = {}


def canonical(name: str) -> str:
    """The one spelling of ``name``: ``"multi_head"`` → ``"multi-head"``, ``"additive"`` → the additive score's name.

    Names that are neither registered nor aliases come back with hyphens (``self_attention`` →
    ``self-attention``); ``create`` refuses those it does not know.
    """
    if not isinstance(name, str):
        raise TypeError(f"an attention name must be a str; got {type(name).__name__}")
    hyphens = name.replace("_", "-")
    return ALIASES.get(hyphens, hyphens)


def _check_spelling(name: str) -> None:
    if name != name.lower() or "_" in name or name in ALIASES:
        raise ValueError(f"registered names are lower case with hyphens (not {name!r}); put old spellings in aliases")


def add(record: Record) -> None:
    """Register ``record`` (what ``@register`` does); a name or alias taken already is refused."""
    for taken in (record.name, *record.aliases):
        if taken in RECORDS or taken in ALIASES:
            raise ValueError(f"attention name {taken!r} is registered twice")
    for alias in record.aliases:
        _check_spelling(alias)
    if not record.supports <= set(SUPPORTS):
        raise ValueError(f"{record.name}: supports takes words of {SUPPORTS}; got {tuple(sorted(record.supports))}")
    RECORDS[record.name] = record
    ALIASES.update(dict.fromkeys(record.aliases, record.name))


def register(name: str, *, aliases: tuple[str, ...] = (), functional: Callable[..., Any] | None = None,
             supports: tuple[str, ...] = (), **defaults: Any) -> Callable[[_ModuleClass], _ModuleClass]:
    """Class decorator: ``@register("luong-dot", score="dot")`` registers a name with default kwargs;
    ``aliases`` are its other names, ``functional`` its pure function, ``supports`` what its call takes."""
    _check_spelling(name)

    def deco(cls: _ModuleClass) -> _ModuleClass:
        add(Record(name, cls, tuple(aliases), functional, tuple(defaults.items()), frozenset(supports)))
        return cls

    return deco


def record(name: str) -> Record:
    """The record of ``name`` written any way; an unknown name is refused with the list of known ones."""
    if canonical(name) not in RECORDS:
        raise ValueError(f"unknown attention {name!r}; available: {', '.join(sorted(RECORDS))}")
    return RECORDS[canonical(name)]


def create(name: str, **kwargs: Any) -> torch.nn.Module:
    """Build the module registered under ``name`` with ``kwargs``."""
    return record(name).build(**kwargs)


def available() -> list[str]:
    """The registered names, sorted."""
    return sorted(RECORDS)


__all__ = ["Record", "RECORDS", "SUPPORTS", "register", "add", "record", "create", "available", "canonical", "ALIASES"]
