"""Logit soft-capping (Gemma 2): squash the attention scores smoothly into (−c, c) before the mask.

Gemma Team, "Gemma 2: Improving Open Language Models at a Practical Size", 2024, §2
(https://arxiv.org/abs/2408.00118); FlashAttention's ``softcap`` argument.

    e_ij  = score(q_i, k_j)                 e.g. q_iᵀ k_j / √d
    ê_ij  = c · tanh(e_ij / c)              (..., q, k)   the soft cap, |ê| < c
    α     = softmax(ê + mask),  o = α v     through the one core, ``attnlab.attention``

``cap=math.inf`` means no cap: ê = e (``c · tanh(e / c)`` tends to e as c grows, while the
float arithmetic would give ``inf · tanh(e / inf)`` = ``inf · 0`` = NaN), so
``softcap_attention(..., cap=math.inf)`` is plain ``attnlab.attention`` (its fast path included).

The cap is applied to the scores *before* the mask, so a masked key still gets
exactly zero weight and never influences anything (the core's contract). Large
scores no longer dominate the softmax; for |e| ≪ c the cap is the identity.

| paper                      | argument      |
|----------------------------|---------------|
| soft-cap value (50.0 for attention logits in Gemma 2) | ``cap`` |
| the logits before capping  | ``scores``    |

Caveat: the fused ``scaled_dot_product_attention`` kernel has no soft-cap, so a
soft-capped attention runs the core's reference path (one GEMM, a tanh, the
masked softmax, one GEMM). Shapes: query (..., q, d), key (..., k, d), value
(..., k, d_v) → (..., q, d_v), weights (..., q, k).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..trace import record
from . import scores as _scores
from .attention import attention

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def check_cap(cap: float) -> float:
    """``cap`` as a float: a positive number, or ``math.inf`` for no cap."""
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0 or cap != cap:
        raise ValueError(f"cap must be a positive number (Gemma 2 uses 50.0 for attention); got {cap!r}")
    return float(cap)


def _no_cap(cap: float) -> bool:
    """``cap = inf``: ê = e, the limit of c · tanh(e / c) (computed, it would be inf · 0 = NaN)."""
    return cap == math.inf


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """ê = cap · tanh(scores / cap), elementwise; any shape. A new tensor (the input is not written).

    ``cap = math.inf``: no cap, ê = e (a copy)."""
    cap = check_cap(cap)
    out = scores.clone() if _no_cap(cap) else torch.tanh(scores / cap) * cap
    record("softcapped_scores", f"ê_ij = {cap:g} · tanh(e_ij / {cap:g})", out, latex=r"\hat e_{ij} = c \tanh(e_{ij} / c)")
    return out


def softcapped(score: str | ScoreFn, cap: float, *, scale: float | None = None) -> ScoreFn:
    """A score callable ``(q, k) -> cap · tanh(score(q, k) / cap)`` for ``attnlab.attention(score=...)``.

    ``score``: ``"scaled_dot"`` (with ``scale``, default 1/√d), ``"dot"`` or any score callable.
    ``cap = math.inf``: no cap (the score itself).
    """
    cap = check_cap(cap)
    if score == "scaled_dot":
        base: ScoreFn = lambda q, k: _scores.scaled_dot(q, k, scale)  # noqa: E731
    elif score == "dot":
        if scale is not None:
            raise ValueError("scale applies to score='scaled_dot'; got score='dot' with scale set")
        base = _scores.dot
    elif callable(score):
        if scale is not None:
            raise ValueError("scale applies to score='scaled_dot' only; a callable score scales itself")
        base = score
    else:
        raise ValueError(f"score must be 'scaled_dot', 'dot' or a callable (q, k) -> scores; got {score!r}")
    return base if _no_cap(cap) else (lambda q, k: softcap(base(q, k), cap))


def softcap_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    cap: float,
    score: str | ScoreFn = "scaled_dot",
    scale: float | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``attnlab.attention`` with the soft-capped score: returns ``(output (..., q, d_v), weights or None)``.

    ``cap = math.inf``: no cap, plain ``attnlab.attention`` with ``score`` and ``scale``."""
    capped = softcapped(score, cap, scale=scale)  # (validates score, scale and cap)
    if _no_cap(check_cap(cap)):
        return attention(query, key, value, score=score, scale=scale, mask=mask, causal=causal,
                         dropout_p=dropout_p, need_weights=need_weights)
    return attention(
        query, key, value, score=capped, mask=mask, causal=causal,
        dropout_p=dropout_p, need_weights=need_weights,
    )


__all__ = ["softcap", "softcapped", "softcap_attention", "check_cap"]
