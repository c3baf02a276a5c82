"""Attention as (output, log-sum-exp), and the exact merge of partial results over disjoint key sets.

For one query row i and a key set S, with scores s_ij = q_i·k_j · scale over the keys j ∈ S
the mask allows:

    ℓ_i = log Σ_j exp(s_ij)              (−∞ when the row may attend no key of S)
    o_i = Σ_j exp(s_ij − ℓ_i) v_j         (0 when ℓ_i = −∞)

Parts over disjoint key sets S_1 … S_P of the same softmax merge exactly (the split-KV trick of
Flash-Decoding, and the step of ring attention):

    ℓ = logsumexp_p ℓ_p,        o = Σ_p exp(ℓ_p − ℓ) o_p

A part whose row has no key (ℓ_p = −∞) gets weight exp(−∞) = 0 and contributes nothing; a row with
no key in any part gets o = 0, ℓ = −∞. Both functions are differentiable (through ℓ as well), with
finite zero gradients on rows with no key.

Symbols → names: o_p ``outs[p]`` (..., q, d_v); ℓ_p ``lses[p]`` (..., q); the mask ``mask``
(..., q, k) bool, True = may attend.

Reference: Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html;
Liu et al., "Ring Attention", 2023, https://arxiv.org/abs/2310.01889.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..functional.attention import attention


def attention_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention of one block, returning ``(out (..., q, d_v), lse (..., q))``.

    The output is the core's (``attnlab.functional.attention.attention``); ℓ is computed beside it
    from the same masked scores. Keys and values the mask forbids never influence either, even
    when NaN or inf (no host read: they are replaced with zeros by tensor ops); a row whose allowed
    keys hold a non-finite one gets ℓ = NaN, as its output is NaN. Differentiable in all inputs."""
    d = query.shape[-1]
    if d == 0:
        raise ValueError(f"query and key need at least one feature (d >= 1); got query {tuple(query.shape)}")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out, _ = attention(query, key, value, mask=mask, scale=scale)
    bad_k = ~torch.isfinite(key).all(-1)  # (..., k)
    s = (query * scale) @ torch.where(bad_k[..., None], 0.0, key).transpose(-1, -2)  # (..., q, k)
    allow = torch.ones_like(s, dtype=torch.bool) if mask is None else mask.expand_as(s)
    live = allow.any(-1, keepdim=True)  # (..., q, 1)
    s = torch.where(allow, s, float("-inf"))
    s = torch.where(live, s, 0.0)  # rows with no key: a finite logsumexp, replaced below
    lse = torch.where(live[..., 0], torch.logsumexp(s, -1), float("-inf"))
    bad = bad_k[..., None, :] | ~torch.isfinite(value).all(-1)[..., None, :]  # (..., 1, k)
    reach = (allow & bad).any(-1)  # (..., q) the row may attend a non-finite key or value
    return out, torch.where(reach, float("nan"), lse)


def merge(outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial attention results over disjoint key sets: ``(o (..., q, d_v), ℓ (..., q))``.

    ``outs[p]`` (..., q, d_v) and ``lses[p]`` (..., q) are part p's output and log-sum-exp (ℓ_p = −∞
    where the row has no key in that part). o = Σ_p exp(ℓ_p − ℓ) o_p, ℓ = logsumexp_p ℓ_p; rows
    with no key anywhere: o = 0, ℓ = −∞, finite zero gradients."""
    if len(outs) != len(lses) or not outs:
        raise ValueError(f"merge needs as many outputs as lses, at least one; got {len(outs)} and {len(lses)}")
    for o, lp in zip(outs, lses):
        if o.shape[:-1] != lp.shape:
            raise ValueError(f"each lse must be its output's shape without the last axis; got {tuple(o.shape)} "
                             f"and {tuple(lp.shape)}")
    stacked = torch.stack(list(lses))  # (P, ..., q)
    dead = torch.isneginf(stacked).all(0)  # (..., q) no key in any part
    total = torch.logsumexp(torch.where(dead, 0.0, stacked), 0)  # finite on dead rows, replaced below
    out = None
    for o, lp in zip(outs, lses):
        w = torch.exp(torch.where(dead, float("-inf"), lp - total))[..., None]  # (..., q, 1); 0 where ℓ_p = −∞
        term = w * torch.where(w > 0, o, 0.0)  # a part with no key contributes exactly 0
        out = term if out is None else out + term
    assert out is not None  # outs is not empty
    return out, torch.where(dead, float("-inf"), total)


__all__ = ["attention_lse", "merge"]
