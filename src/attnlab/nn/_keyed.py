"""Shared plumbing of the decoder-side attention modules (Bahdanau, Luong).

Their call shape: ``forward(query, keys, values=None, mask=None, need_weights=True)``
with query ``(b, d_q)`` (one decoding step) or ``(b, q, d_q)``, keys ``(b, k, d_k)``,
values ``(b, k, d_v)`` (default: the keys), mask ``(b, k)`` or ``(b, q, k)``
(bool True = may attend, or a float bias). Returns ``(context, weights)`` with
context ``(b, d_v)`` / ``(b, q, d_v)`` and weights ``(b, k)`` / ``(b, q, k)``.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..functional.softmax import masked_softmax
from ..trace import record


def prepare(query, keys, values, mask):
    """Validate and lift to (b, q, ·); returns (query, values, mask, single_step)."""
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
    if mask is not None:
        if not isinstance(mask, torch.Tensor):
            raise ValueError(f"mask must be a torch.Tensor; got {type(mask).__name__}")
        if mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (b, 1, k)
        if mask.dtype != torch.bool or mask.shape not in ((b, 1, k), (b, q, k)):  # else: valid, skip the general check
            _checks.mask(mask, (b, q, k))  # (it costs a torch.broadcast_shapes call, at every decoding step)
    return query, values, mask, single


def finish(scores, values, mask, single, need_weights):
    """scores (b, q, k) → masked softmax → context; squeeze the step dimension back."""
    weights = masked_softmax(scores, mask)  # (b, q, k)
    record("weights", "α_ij = exp(e_ij) / Σ_j' exp(e_ij')", weights,
           latex=r"\alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{j'} \exp(e_{ij'})}")
    context = weights.to(values.dtype) @ values  # (b, q, d_v)
    record("context", "c_i = Σ_j α_ij v_j", context, latex=r"c_i = \sum_j \alpha_{ij} v_j")
    if single:
        context, weights = context.squeeze(1), weights.squeeze(1)
    return context, (weights if need_weights else None)
