"""Shared plumbing of the decoder-side attention modules (Bahdanau, Luong).

Their call shape is the one of every classic module (``_signature.classic_forward``):
``forward(query, key, value=None, *, mask=None, need_weights=False)`` with query ``(b, d_q)``
(one decoding step) or ``(b, q, d_q)``, key ``(b, k, d_k)``, value ``(b, k, d_v)`` (default:
the keys), mask an ``attnlab.Mask`` (a model builds one per forward, e.g. ``Mask.padding(src_mask)``,
and passes it to every step), ``(b, k)`` or ``(b, q, k)`` (bool True = may attend, or a float bias). Returns
``(context, weights or None)`` with context ``(b, d_v)`` / ``(b, q, d_v)`` and weights ``(b, k)`` /
``(b, q, k)`` when ``need_weights=True``. That ``forward`` is written once, here (``keyed_forward``);
a module gives its score (``_score(projected)``), its ``query_dim`` and ``key_dim``, the width of
its ``precompute`` (``projected_width``) and whether it reads it (``reads_projected``).

The masked softmax and the weighted sum are the core's
(``attnlab.functional.attention.attention`` with the module's score as a
callable), so the fully-masked-row rule and the non-finite rule hold here
because they are written once there. The score callable receives the keys
*after* the core zeroed non-finite entries, so a NaN in a masked key never enters
a projection (nor its weight's gradient). ``precompute(keys)``, the keys' part
of the score computed once for every decoding step, runs before the core sees a
mask: it keeps a non-finite key out of its projection the same way
(``attnlab.functional.nonfinite.map_finite_rows``) and hands the core an
all-NaN row there, with or without a mask of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks
from ..functional.attention import ScoreFn, attention
from ..mask import Mask
from ..trace import active
from ._signature import classic_forward


def prepare(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor | None, mask: torch.Tensor | Mask | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | Mask | None, bool]:
    """Validate and lift to (b, q, ·); returns (query, values, mask, single_step). A mask value is
    checked against the call's sizes and passed to the core as it is (the core reads its plan)."""
    _checks.tensor("query", query, 2)
    _checks.tensor("keys", keys, 3)
    if keys.dim() != 3:
        raise ValueError(f"keys must be (b, k, d_k); got shape {_checks.shape(keys)}")
    single = query.dim() == 2
    if single:
        query = query.unsqueeze(1)  # (b, 1, d_q)
    if query.dim() != 3:
        raise ValueError(f"query must be (b, d_q) or (b, q, d_q); got shape {_checks.shape(query)}")
    if query.shape[0] != keys.shape[0]:
        raise ValueError(f"query {_checks.shape(query)} and keys {_checks.shape(keys)} have different batch sizes")
    values = keys if values is None else values
    _checks.tensor("values", values, 3)
    if values.shape[:2] != keys.shape[:2]:
        raise ValueError(
            f"values must be (b, k, d_v) with the keys' b and k; keys {_checks.shape(keys)}, values {_checks.shape(values)}"
        )
    b, q, k = query.shape[0], query.shape[1], keys.shape[1]
    if isinstance(mask, Mask):
        mask.check(b, q, k)
    elif mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise ValueError(f"mask must be a torch.Tensor or an attnlab.Mask; got {type(mask).__name__}")
        if mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (b, 1, k)
        if mask.dtype != torch.bool or mask.shape not in ((b, 1, k), (b, q, k)):  # else: valid, skip the general check
            _checks.mask(mask, (b, q, k))  # (it costs a broadcast check, at every decoding step)
    return query, values, mask, single


def mask_keys(keys: torch.Tensor, mask: torch.Tensor | Mask | None) -> torch.Tensor:
    """Zero the key rows that a (b, k) bool mask (or ``Mask.padding``) forbids (for ``precompute``: keep
    NaN out of W_k)."""
    if mask is None:
        return keys
    if isinstance(mask, Mask) and mask.keys is not None:
        mask = mask.keys.to(keys.device)  # (b, k), True = a real key
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != tuple(keys.shape[:2]):
        raise ValueError(
            f"precompute's mask must be a bool (b, k) = {tuple(keys.shape[:2])} padding mask (True = real key) "
            f"or Mask.padding(...); got "
            + (f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else
               repr(mask) if isinstance(mask, Mask) else type(mask).__name__)
        )
    return torch.where(mask.unsqueeze(-1), keys, torch.zeros((), dtype=keys.dtype, device=keys.device))


def check_projected(projected_keys: torch.Tensor, keys: torch.Tensor, width: int) -> None:
    """``projected_keys`` must be (b, k, width) with the keys' b and k."""
    _checks.tensor("projected_keys", projected_keys, 3)
    expected = (*keys.shape[:2], width)
    if tuple(projected_keys.shape) != expected:
        raise ValueError(
            f"projected_keys must be (b, k, d) = {expected} (precompute(keys) of these keys); "
            f"got {_checks.shape(projected_keys)}"
        )


def finish(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    score: ScoreFn,
    mask: torch.Tensor | Mask | None,
    single: bool,
    need_weights: bool,
    kv_finite: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The core: score(query, keys) → masked softmax → Σ α v; squeeze the step dimension back.

    query (b, q, d_q), keys (b, k, ·) (what ``score`` reads: raw or projected keys), values (b, k, d_v).
    ``kv_finite``: the caller vouches that keys and values are finite at masked positions (the core's flag).
    """
    context, weights = attention(query, keys, values, score=score, mask=mask, need_weights=True, kv_finite=kv_finite)
    assert weights is not None  # asked for
    if single:
        context, weights = context.squeeze(1), weights.squeeze(1)
    return context, (weights if need_weights else None)


@classic_forward
def keyed_forward(
    self: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor | None = None,
    *,
    mask: torch.Tensor | Mask | None = None,
    need_weights: bool = False,
    projected_keys: torch.Tensor | None = None,
    kv_finite: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query (b, d_q) | (b, q, d_q), key (b, k, d_k), value (b, k, d_v) (default: the keys),
    mask ``attnlab.Mask`` | (b, k) | (b, q, k) → (context, weights or None).

    ``projected_keys``: ``precompute(key)``, computed once per sentence (not read while a trace
    records: the readable scores run on the keys). ``kv_finite=True``: the caller vouches that keys,
    values (and ``projected_keys``) hold no NaN or inf at masked positions, so the core skips its
    per-call passes over them (``attnlab.attention``'s flag; a decoder whose memory's padding is
    zero by construction).
    """
    query, values, mask, single = prepare(query, key, value, mask)
    if query.shape[-1] != self.query_dim or key.shape[-1] != self.key_dim:
        raise ValueError(
            f"expected query (..., {self.query_dim}) and keys (b, k, {self.key_dim}); "
            f"got query {tuple(query.shape)} and keys {tuple(key.shape)}"
        )
    _checks.module_input(self, ("query", "keys"), (query, key))
    if projected_keys is None or active() or not self.reads_projected:
        return finish(query, key, values, self._score(False), mask, single, need_weights, kv_finite)
    check_projected(projected_keys, key, self.projected_width)
    return finish(query, projected_keys, values, self._score(True), mask, single, need_weights, kv_finite)
