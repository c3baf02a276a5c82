"""Ranks agree before they communicate: one small collective, the same clear error on every rank.

A context-parallel call exchanges blocks whose sizes every rank assumes of the others. When one rank
is called with other shapes or options (another length, a causal flag the others lack, a mask the
others do not have), or fails its own checks, the exchange would deadlock or abort the process group.
So, before any exchange, every rank shares what it was given and whether its own checks passed
(``all_gather_object``: one collective of a few hundred bytes), and every rank raises the same
``ValueError`` naming each rank's value of what differs, or the rank whose check failed and why.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .layout import world


def _shape(t: object) -> object:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


def signature(q: object, k: object, v: object, **options: Any) -> dict[str, object]:
    """What every rank must share: the shards' shapes and dtype, whether a mask is given, the options."""
    sig: dict[str, object] = {"q": _shape(q), "k": _shape(k), "v": _shape(v),
                              "dtype": str(getattr(q, "dtype", None))}
    for name, value in options.items():
        if name == "mask":
            sig["mask"] = None if value is None else _shape(value)
        elif name == "pattern":
            sig["pattern"] = None if value is None else repr(value)
        else:
            sig[name] = value
    return sig


def _disagreement(sigs: list[dict[str, object]]) -> str | None:
    fields = [name for name in sigs[0] if any(s.get(name) != sigs[0][name] for s in sigs[1:])]
    if not fields:
        return None
    shown = "; ".join(f"{name}: " + ", ".join(f"rank {r} {s.get(name)!r}" for r, s in enumerate(sigs))
                      for name in fields)
    return (f"the ranks of a context-parallel call disagree before communicating ({shown}); every rank must "
            f"pass shards of one shape and the same options")


def agree(group: Any, problem: ValueError | None, sig: dict[str, object]) -> None:
    """Every rank shares ``problem`` (its own check's error, or None) and ``sig``; every rank raises
    the same error (of the failed check's type, else ``ValueError``) when a rank failed its check or
    the signatures differ. One process: the problem is raised as it is."""
    if problem is not None and (not dist.is_available() or not dist.is_initialized()):
        raise problem
    size = world(group)[1]  # (the clear error for a missing process group)
    if size == 1:
        if problem is not None:
            raise problem
        return
    shared: list[Any] = [None] * size
    dist.all_gather_object(shared, (None if problem is None else (type(problem), str(problem)), sig), group=group)
    failed = [(r, p) for r, (p, _) in enumerate(shared) if p is not None]
    if failed:
        raise failed[0][1][0]("; ".join(f"rank {r}: {message}" for r, (_, message) in failed))
    differs = _disagreement([s for _, s in shared])
    if differs is not None:
        raise ValueError(differs)


__all__ = ["agree", "signature"]
