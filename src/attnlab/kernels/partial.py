"""Partial attention results over disjoint key sets, and their exact merge.

For one query row i and a key set S, with scores s_ij = q_i·k_j · scale over the keys j ∈ S
the mask allows:

    ℓ_i = log Σ_j exp(s_ij)              (−∞ when the row may attend no key of S)
    o_i = Σ_j exp(s_ij − ℓ_i) v_j         (0 when ℓ_i = −∞: the dead-row rule)

Parts over disjoint key sets S_1 … S_P of the same softmax merge exactly (the split-KV trick of
Flash-Decoding, the step of ring attention, and how the CPU block-sparse kernel joins its
window, global and tile parts):

    ℓ = logsumexp_p ℓ_p,        o = Σ_p exp(ℓ_p − ℓ) o_p

A part whose row has no key (ℓ_p = −∞) gets weight exp(−∞) = 0 and contributes exactly nothing,
whatever its output holds there; a row with no key in any part gets o = 0, ℓ = −∞, with finite
zero gradients (no −∞ − (−∞) is ever formed). A NaN ℓ_p (a row that attended a non-finite key)
makes the merged row NaN.

Every producer of a part (``band``, ``global_part``, ``tiles``, ``lse.attention_lse``,
``distributed.ring``) states its rows with no key through ``finish_partial``, so the rule is
written here once.

Symbols → names: o_p ``parts[p].out`` (..., q, d_v); ℓ_p ``parts[p].lse`` (..., q).

Reference: Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html;
Liu et al., "Ring Attention", 2023, https://arxiv.org/abs/2310.01889.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class PartialResult(NamedTuple):
    """Attention of queries over one key set: ``out`` (..., q, d_v), ``lse`` (..., q) (−∞ on rows with no key)."""

    out: torch.Tensor
    lse: torch.Tensor


def finish_partial(out: torch.Tensor, lse: torch.Tensor, dead: torch.Tensor | None) -> PartialResult:
    """The dead-row rule: rows with no key (``dead`` bool broadcastable to lse's shape (..., q), or None
    for none) get out = 0 and lse = −∞, whatever the kernel left there (no host read)."""
    if dead is None:
        return PartialResult(out, lse)
    return PartialResult(out.masked_fill(dead[..., None], 0.0), lse.masked_fill(dead, float("-inf")))


def no_keys(like: torch.Tensor, shape: Sequence[int]) -> PartialResult:
    """The partial result of rows that may attend no key at all: out = 0 of ``shape`` (..., q, d_v),
    lse = −∞ of shape (..., q), in ``like``'s dtype and on its device."""
    return PartialResult(like.new_zeros(*shape), like.new_full(tuple(shape[:-1]), float("-inf")))


def _check(parts: Sequence[PartialResult | tuple[torch.Tensor, torch.Tensor]]) -> list[PartialResult]:
    if len(parts) == 0:
        raise ValueError("merge needs at least one partial result (out, lse); got none")
    out = [PartialResult(*p) for p in parts]
    for p in out:
        if p.out.shape[:-1] != p.lse.shape:
            raise ValueError(f"each lse must be its output's shape without the last axis; got {tuple(p.out.shape)} "
                             f"and {tuple(p.lse.shape)}")
    if len({p.out.shape for p in out}) > 1:
        raise ValueError(f"the parts must cover the same query rows with the same d_v; got outputs "
                         f"{[tuple(p.out.shape) for p in out]}")
    return out


def merge(parts: Sequence[PartialResult | tuple[torch.Tensor, torch.Tensor]], *, inplace: bool = False) -> PartialResult:
    """Merge partial results over disjoint key sets of the same queries → ``PartialResult(o, ℓ)``.

    ``parts[p]`` is a ``PartialResult`` (or an ``(out, lse)`` pair): out (..., q, d_v), lse (..., q),
    the same shapes in every part. ℓ = logsumexp_p ℓ_p, o = Σ_p exp(ℓ_p − ℓ) o_p; a part adds nothing
    to a row where its ℓ_p = −∞; rows with no key anywhere: o = 0, ℓ = −∞, finite zero gradients.
    Differentiable in every out and lse.

    ``inplace``: the parts are the kernels' own, fresh buffers without autograd that keep the dead-row
    rule (``finish_partial``): the first part's output becomes the merged one and the others are
    overwritten, so no new (..., q, d_v) tensor is made (one part is returned as it is)."""
    parts = _check(parts)
    if inplace and len(parts) == 1:
        return parts[0]
    stacked = torch.stack([p.lse for p in parts])  # (P, ..., q)
    dead = torch.isneginf(stacked).all(0)  # (..., q) no key in any part
    total = torch.logsumexp(torch.where(dead, 0.0, stacked), 0)  # finite on dead rows, replaced below
    out: torch.Tensor | None = None
    for p in parts:
        w = torch.exp(p.lse - total)[..., None]  # (..., q, 1); 0 where ℓ_p = −∞ (ℓ is finite there: 0 on dead rows)
        if inplace:  # (its rows with no key hold 0: w · 0 = 0)
            term = p.out.mul_(w)
        else:  # a part with no key contributes exactly 0, whatever its output holds there
            term = w * torch.where(w > 0, p.out, 0.0)
        out = term if out is None else out.add_(term)
    assert out is not None  # parts is not empty
    return PartialResult(out, torch.where(dead, float("-inf"), total))


def merge_rows(whole: PartialResult, part: PartialResult, rows: torch.Tensor) -> PartialResult:
    """Merge ``part``, over the query rows ``rows`` (r,) only (out (..., r, d_v), lse (..., r)), into
    ``whole`` (over all rows), without autograd: ``whole.out`` and ``part.out`` are overwritten."""
    sub = PartialResult(whole.out.index_select(-2, rows), whole.lse.index_select(-1, rows))
    merged = merge([sub, part], inplace=True)
    return PartialResult(whole.out.index_copy_(-2, rows, merged.out), whole.lse.index_copy(-1, rows, merged.lse))


__all__ = ["PartialResult", "merge", "merge_rows", "finish_partial", "no_keys"]
