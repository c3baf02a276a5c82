"""The one call shape of the classic attention modules, and a clear error for the old ones.

Every classic module (``dot``, ``scaled-dot``, ``softcap``, ``bahdanau``, ``luong-*``) is called

    module(query, key, value=None, *, mask=None, need_weights=False) -> (out, weights or None)

with its own keyword-only extras after those (``causal``, ``projected_keys``, ...). The
Bahdanau and Luong modules used to take ``keys=``/``values=``, a positional ``mask`` and
``need_weights=True`` by default; ``classic_forward`` turns such a call into a ``TypeError``
that names the new spelling instead of letting Python's "unexpected keyword" (or a mask
silently read as ``need_weights``) through. The wrapped ``forward`` keeps its signature
(``inspect.signature`` follows ``__wrapped__``).

``core_forward`` is the whole ``forward`` of a module whose computation is one functional call
(``dot``, ``scaled-dot``, ``softcap``): the value defaults to the key, dropout runs in training
only, and the module's ``attend(query, key, value, **core)`` adds its own arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

SIGNATURE = "forward(query, key, value=None, *, mask=None, need_weights=False)"
RENAMED = {"keys": "key", "values": "value"}

_Forward = TypeVar("_Forward", bound=Callable[..., Any])


def classic_forward(forward: _Forward) -> _Forward:
    """Decorate a classic module's ``forward``: old keyword names or a positional mask raise ``TypeError``."""

    @functools.wraps(forward)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = type(self).__name__
        for old, new in RENAMED.items():
            if old in kwargs:
                raise TypeError(f"{name}: {old}= is now {new}= ({SIGNATURE})")
        if len(args) > 3:
            raise TypeError(
                f"{name}: mask and need_weights are keyword-only now (mask=..., need_weights=...); "
                f"got {len(args)} positional arguments ({SIGNATURE})"
            )
        return forward(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


@classic_forward
def core_forward(
    self: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor | None = None,
    *,
    mask: torch.Tensor | None = None,
    need_weights: bool = False,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query (..., q, d), key (..., k, d), value (..., k, d_v) (default: the keys), mask (bool True = may
    attend, or a float bias) broadcast to (..., q, k), ``causal``: query i sees keys up to i
    → (out (..., q, d_v), weights (..., q, k) or None)."""
    dropout_p = self.attn_drop if self.training else 0.0
    return self.attend(query, key, key if value is None else value, mask=mask, causal=causal, dropout_p=dropout_p,
                       need_weights=need_weights)


__all__ = ["classic_forward", "core_forward", "SIGNATURE", "RENAMED"]
