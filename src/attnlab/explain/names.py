"""The names of the mechanisms ``attnlab explain`` runs, spelled as ``attnlab.nn`` spells them.

Nothing here is written by hand: ``explain.mechanisms`` adds each mechanism's record (its
walkthrough) with ``mechanisms.add``, which lists its name here, so the example parser (which
checks a file's ``mechanism``) reads the same names as the runners, without importing them.
The package's ``__init__`` imports ``mechanisms``, so the list is complete as soon as this
module can be reached. A mechanism with a registered module has the registry's name
(``multi-head``, ``bahdanau``, ``mla``). Other spellings (``multi_head``, ``additive``,
``latent``) are read by the registry's one ``canonical`` and its alias table, which is
filled from the registered records; a walkthrough record's ``shows`` names the registered
modules whose arithmetic it shows (``WALKTHROUGH_OF``, derived from those records).
"""

from __future__ import annotations

from ..nn.registry import ALIASES
from ..nn.registry import canonical as _registry_canonical

NAMES: list[str] = []  # in the order the records are added
WALKTHROUGH_OF: dict[str, str] = {}  # a registered module → the walkthrough that shows it


def add(name: str, shows: tuple[str, ...] = ()) -> None:
    """List ``name`` (a walkthrough) and the registered modules it shows."""
    NAMES.append(name)
    WALKTHROUGH_OF.update(dict.fromkeys(shows, name))


def canonical(name: str) -> str:
    """The walkthrough's name for a mechanism written any way (``multi_head`` → ``multi-head``); unknown names
    come back hyphenated for the caller to refuse."""
    name = _registry_canonical(name)
    return WALKTHROUGH_OF.get(name, name)


def spellings(name: str) -> list[str]:
    """Every spelling that ``canonical`` reads as ``name`` (for the JSON Schema and the docs)."""
    others = [a for a, c in {**ALIASES, **WALKTHROUGH_OF}.items() if canonical(c) == name]
    return list(dict.fromkeys(s for n in (name, *others) for s in (n, n.replace("-", "_"))))


__all__ = ["NAMES", "ALIASES", "WALKTHROUGH_OF", "add", "canonical", "spellings"]
