"""The names of the mechanisms ``attnlab explain`` runs, spelled as ``attnlab.nn`` spells them.

One list, read by the example parser (to check a file's ``mechanism``) and by the registry of
runners (``explain.mechanisms.MECHANISMS``, which has exactly one entry per name; a test checks).
A mechanism with a registered module has the registry's name (``multi-head``, ``bahdanau``,
``mla``); the others (``masked``, ``attentional``, ``self-attention``) are spelled the same way.
Other spellings (``multi_head``, ``additive``, ``latent``) are read by the registry's one
``canonical`` and its one table ``ALIASES``: no second table here.
"""

from __future__ import annotations

from ..nn.registry import ALIASES
from ..nn.registry import canonical as _registry_canonical

NAMES: tuple[str, ...] = (
    "dot",
    "scaled-dot",
    "luong-general",
    "bahdanau",
    "luong-concat",
    "masked",
    "sparse",
    "attentional",
    "self-attention",
    "multi-head",
    "cross",
    "channel",
    "spatial",
    "softcap",
    "linear",
    "differential",
    "mla",
    "gqa",
    "neighborhood-2d",
    "target-attention",
)

# Registered modules that compute what another walkthrough shows (not other spellings: modules of
# their own): Luong's dot score is the unscaled ``dot``.
WALKTHROUGH_OF: dict[str, str] = {"luong-dot": "dot"}


def canonical(name: str) -> str:
    """The walkthrough's name for a mechanism written any way (``multi_head`` → ``multi-head``); unknown names
    come back hyphenated for the caller to refuse."""
    name = _registry_canonical(name)
    return WALKTHROUGH_OF.get(name, name)


def spellings(name: str) -> list[str]:
    """Every spelling that ``canonical`` reads as ``name`` (for the JSON Schema and the docs)."""
    others = [a for a, c in {**ALIASES, **WALKTHROUGH_OF}.items() if canonical(c) == name]
    return list(dict.fromkeys(s for n in (name, *others) for s in (n, n.replace("-", "_"))))


__all__ = ["NAMES", "ALIASES", "WALKTHROUGH_OF", "canonical", "spellings"]
