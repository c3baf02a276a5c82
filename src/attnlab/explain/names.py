"""The names of the mechanisms ``attnlab explain`` runs, and their other spellings.

One list, read by the example parser (to check a file's ``mechanism``) and by the registry of
runners (``explain.mechanisms.MECHANISMS``, which has exactly one entry per name; a test checks).
"""

from __future__ import annotations

NAMES: tuple[str, ...] = (
    "dot",
    "scaled_dot",
    "general",
    "additive",
    "concat",
    "masked",
    "sparse",
    "attentional",
    "self_attention",
    "multi_head",
    "cross_attention",
    "channel",
    "spatial",
    "softcap",
    "linear",
    "differential",
    "latent",
    "gqa",
    "neighborhood",
)

# Other spellings of the mechanisms' names: nn's registry spells names with hyphens
# (``multi-head``) and by paper (``bahdanau``, ``luong-dot``). A local map until
# ``attnlab.nn.registry.canonical`` lands; explain's own names stay as they are.
ALIASES: dict[str, str] = {
    "bahdanau": "additive",
    "luong-dot": "dot",
    "luong-general": "general",
    "luong-concat": "concat",
    "cross": "cross_attention",
    "mla": "latent",
    "neighborhood-2d": "neighborhood",
}


def canonical(name: str) -> str:
    """explain's name for a mechanism written either way (``multi-head`` → ``multi_head``); unknown names unchanged."""
    if name in NAMES:
        return name
    if name in ALIASES:
        return ALIASES[name]
    under = name.replace("-", "_")
    return under if under in NAMES else name


__all__ = ["NAMES", "ALIASES", "canonical"]
