"""Masks: one convention for the whole library.

* A **bool** mask means **True = may attend**, False = masked out.
* A **float** mask is an additive bias on the scores (``-inf`` = masked out).
* Masks broadcast against the scores ``(b, h, q, k)`` by PyTorch's rules, so a
  ``(b, k)`` padding mask is given as ``(b, 1, 1, k)`` (``as_key_mask``); a
  mask that does not broadcast to the scores raises ``ValueError``.
* Modules (and ``functional.multi_head_attention``) also take the short forms
  that ``score_mask`` reads: ``(k,)`` for every query, ``(b, k)`` padding,
  ``(q, k)`` for every sequence, ``(b, q, k)`` for every head. A 2-D mask is
  read by its shape; when ``b == q`` both readings fit and it raises
  ``ValueError``: pass ``(b, 1, 1, k)`` or ``(1, 1, q, k)`` / ``(b, q, k)``.

``causal`` is aligned bottom-right: query i of a block of q queries at the end
of k keys may attend keys ``j <= i + (k - q)``. With ``q == k`` this is the
usual lower triangle; with ``q < k`` (cached decoding: the new queries come
after the cached keys) the last query sees every key.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from . import _checks


def padding(lengths: torch.Tensor | Sequence[int], max_len: int | None = None) -> torch.Tensor:
    """(b,) lengths → (b, k) bool mask, True on the first ``lengths[i]`` (real) tokens."""
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-d tensor of integers; got shape {_checks.shape(lengths)} dtype {lengths.dtype}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0; got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    k = longest if max_len is None else int(max_len)
    if k < longest:
        raise ValueError(f"max_len={k} is shorter than the longest length {longest}")
    return torch.arange(k, device=lengths.device) < lengths.unsqueeze(-1)  # (b, k)


def as_key_mask(mask: torch.Tensor) -> torch.Tensor:
    """(b, k) key mask → (b, 1, 1, k), broadcastable to scores (b, h, q, k)."""
    if mask.dim() != 2:
        raise ValueError(f"as_key_mask expects a (b, k) mask; got shape {_checks.shape(mask)}")
    return mask[:, None, None, :]


def _ambiguous(shape: tuple[int, ...], b: int, q_len: int, k_len: int) -> ValueError:
    return ValueError(
        f"a 2-D mask of shape {shape} is ambiguous with batch b={b}, q={q_len} queries and k={k_len} keys: "
        f"it could be a (b, k) padding mask or a (q, k) mask for every sequence. Be explicit: "
        f"(b, 1, 1, k) for padding (attnlab.masks.as_key_mask(mask)), or (1, 1, q, k) "
        f"(mask[None, None]) or (b, q, k) for a per-query mask"
    )


def score_mask(
    mask: torch.Tensor | None, b: int, q_len: int, k_len: int
) -> tuple[torch.Tensor | None, bool]:
    """A module's ``mask`` argument → (a mask broadcastable to the scores (b, h, q, k), is it key padding).

    | given           | read as                 | when                                          |
    |-----------------|-------------------------|-----------------------------------------------|
    | (k,)            | (1, 1, 1, k)            | the same keys for every query                 |
    | (b, k)          | (b, 1, 1, k), padding   | b != q (or b = q <= 1: both readings agree)   |
    | (q, k)          | (1, 1, q, k)            | q != b                                        |
    | (b, k) = (q, k) | ``ValueError``          | b = q > 1: say (b, 1, 1, k) or (1, 1, q, k)   |
    | (b, q, k)       | (b, 1, q, k)            | one mask for every head                       |
    | 4-D             | unchanged               | padding when it is (b, 1, 1, k)               |

    A 2-D mask whose shape is neither raises ``ValueError``; other shapes are
    left for the broadcast check of the attention that receives them.
    "Padding" tells a self-attention module that the mask's last q columns mark
    its padded queries too.
    """
    if mask is None:
        return None, False
    if type(mask).__name__ == "Mask" and hasattr(mask, "key_padding"):  # an attnlab.Mask: its own forms
        value: Any = mask  # (attnlab.mask sits above this module: known here by what it has)
        value.check(b, q_len, k_len)
        if value.keys is not None:
            return value.keys[:, None, None, :], True  # (b, 1, 1, k)
        return value.tensor(q_len, k_len), False  # (b|1, 1, q|1, k), made once per size and kept
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor (bool or float) or an attnlab.Mask; got {type(mask).__name__}")
    shape = tuple(mask.shape)
    if mask.dim() == 1:
        return mask.reshape(1, 1, 1, -1), False
    if mask.dim() == 3:
        return mask.unsqueeze(1), False
    if mask.dim() != 2:
        return mask, mask.dim() == 4 and shape == (b, 1, 1, k_len)
    rows, cols = shape
    if cols not in (k_len, 1) or rows not in (b, q_len, 1):
        raise ValueError(
            f"a 2-D mask of shape {shape} does not broadcast to the scores: it must be a (b, k) = ({b}, {k_len}) "
            f"padding mask or a (q, k) = ({q_len}, {k_len}) mask for every sequence"
        )
    if rows == b and (b != q_len or b <= 1):  # b = q <= 1: both readings give the same scores
        return mask[:, None, None, :], True  # (b, 1, 1, k)
    if rows == q_len and q_len != b:
        return mask[None, None], False  # (1, 1, q, k)
    if rows == 1:
        return mask[None, None], False  # (1, 1, 1, k): every query of every sequence
    raise _ambiguous(shape, b, q_len, k_len)


def causal(q_len: int, k_len: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """(q, k) bool mask, True where key j may be attended by query i: j <= i + (k - q)."""
    k_len = q_len if k_len is None else k_len
    if q_len < 0 or k_len < 0:
        raise ValueError(f"lengths must be >= 0; got q_len={q_len}, k_len={k_len}")
    i = torch.arange(q_len, device=device).unsqueeze(-1)
    j = torch.arange(k_len, device=device)
    return j <= i + (k_len - q_len)  # (q, k)


def to_bias(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A bool mask as an additive bias: 0 where True, -inf where False (float masks pass through)."""
    if mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, torch.tensor(float("-inf"), dtype=dtype, device=mask.device))
    return mask.to(dtype)


def combine(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Combine masks (``None`` entries are ignored).

    All bool: logical AND (a key may be attended only if every mask allows it).
    Any float: bool masks become ``0 / -inf`` biases and all are added, in the widest
    floating dtype given (float16 + float64 biases add in float64, as PyTorch promotes).
    The result broadcasts the inputs; shapes that do not broadcast raise ``ValueError``.
    """
    given = [m for m in masks if m is not None]
    if not given:
        return None
    for m in given:
        if m.dtype != torch.bool and not m.is_floating_point():
            raise ValueError(f"masks must be bool or floating; got dtype {m.dtype}")
    try:
        _checks.broadcast_shapes(*(m.shape for m in given))
    except RuntimeError:
        raise ValueError(
            "masks do not broadcast together: " + ", ".join(_checks.shape(m) for m in given)
        ) from None
    if all(m.dtype == torch.bool for m in given):
        out = given[0]
        for m in given[1:]:
            out = out & m
        return out
    dtype = functools.reduce(torch.promote_types, (m.dtype for m in given if m.is_floating_point()))
    out = to_bias(given[0], dtype)
    for m in given[1:]:
        out = out + to_bias(m, dtype)
    return out


def in_dtype(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A module's mask in the scores' ``dtype``: a float mask (additive bias) of another floating dtype is
    converted (a float16 bias with float64 queries, as ``torch.nn.MultiheadAttention`` converts it);
    bool masks and None pass through."""
    if mask is None or not mask.is_floating_point() or mask.dtype == dtype:
        return mask
    return mask.to(dtype)


def append_keys(mask: torch.Tensor | None, k_len: int, n: int) -> torch.Tensor | None:
    """A mask broadcastable to (..., q, k) → (..., q, k + n): ``n`` key columns appended that every query may
    attend (True, or a 0 bias), for keys added after the real ones (``add_bias_kv``, ``add_zero_attn``)."""
    if mask is None:
        return None
    mask = mask.expand(*mask.shape[:-1], k_len)
    fill = torch.ones((), dtype=torch.bool, device=mask.device) if mask.dtype == torch.bool else \
        torch.zeros((), dtype=mask.dtype, device=mask.device)
    return torch.cat([mask, fill.expand(*mask.shape[:-1], n)], dim=-1)


def allowed(mask: torch.Tensor) -> torch.Tensor:
    """Where a mask lets a query attend: the bool mask itself, or ``bias > -inf`` for a float mask."""
    return mask if mask.dtype == torch.bool else mask > float("-inf")


__all__ = ["padding", "as_key_mask", "score_mask", "causal", "combine", "to_bias", "in_dtype", "append_keys", "allowed"]
