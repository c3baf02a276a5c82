"""Multiplicative (Luong) attention: the "dot", "general" and "concat" scores as one module.

    dot:      e_tj = s_tᵀ h_j              (needs d_q == d_k)
    general:  e_tj = s_tᵀ W_a h_j
    concat:   e_tj = v_aᵀ tanh(W_a [s_t; h_j])
    α_t = softmax(e_t),  c_t = Σ_j α_tj h_j

Luong, Pham & Manning 2015, "Effective Approaches to Attention-based Neural
Machine Translation", https://arxiv.org/abs/1508.04025 (section 3.1, eq. 8).
``scale=True`` divides dot and general scores by √d_k (as Vaswani et al. 2017 do).

| paper   | here                             | shape               |
|---------|----------------------------------|---------------------|
| h_t     | ``query`` (the decoder state s_t) | (b, d_q) or (b, q, d_q) |
| h̄_s     | rows of ``keys`` (and values)    | (b, k, d_k)         |
| W_a     | ``weight.weight`` (general)       | (d_q, d_k)          |
| W_a     | ``weight.weight`` (concat)        | (d_a, d_q + d_k)    |
| v_a     | ``v`` (concat)                    | (d_a,)              |

``precompute(keys)`` returns what depends on the keys only (W_a h̄_s for
general, the key half of W_a [·; h̄_s] for concat) so a decoder computes it once
per sentence. The concat score runs through the chunked additive kernel
(W [q; k] = W_q q + W_k k), so it never holds a (b, q, k, d_a) tensor either;
while a trace records, the readable ``attnlab.scores`` functions run instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .. import _checks
from ..functional import scores as _scores
from ..functional.nonfinite import map_finite_rows
from ..kernels.chunked_additive import DEFAULT_MAX_ELEMS, chunked_additive_scores
from ..mask import Mask
from ..trace import active, record
from ._keyed import keyed_forward, mask_keys
from .registry import register

SCORES = ("dot", "general", "concat")


@register("luong-dot", functional=_scores.dot, score="dot", supports=("mask", "weights"))
@register("luong-general", aliases=("general",), functional=_scores.general, score="general", supports=("mask", "weights"))
@register("luong-concat", aliases=("concat",), functional=_scores.concat, score="concat", supports=("mask", "weights"))
class LuongAttention(nn.Module):
    """``LuongAttention(query_dim, key_dim, score="dot"|"general"|"concat", scale=False, attn_dim=None)``."""

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        score: str = "general",
        scale: bool = False,
        *,
        attn_dim: int | None = None,
        max_elems: int = DEFAULT_MAX_ELEMS,
    ):
        super().__init__()
        query_dim, key_dim = _checks.integer("query_dim", query_dim), _checks.integer("key_dim", key_dim)
        attn_dim = _checks.optional_integer("attn_dim", attn_dim)
        max_elems = _checks.integer("max_elems", max_elems)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}; got {score!r}")
        if score == "dot" and query_dim != key_dim:
            raise ValueError(
                f"the dot score needs query_dim == key_dim; got {query_dim} and {key_dim} (use score='general')"
            )
        if score == "concat" and scale:
            raise ValueError("scale applies to the dot and general scores, not concat")
        self.query_dim, self.key_dim, self.score, self.scale = query_dim, key_dim, score, scale
        self.max_elems = max_elems
        if score == "general":
            self.weight = nn.Linear(key_dim, query_dim, bias=False)  # W_a: (d_q, d_k)
        elif score == "concat":
            self.attn_dim = attn_dim or query_dim
            self.weight = nn.Linear(query_dim + key_dim, self.attn_dim, bias=False)  # (d_a, d_q + d_k)
            self.v = nn.Parameter(torch.empty(self.attn_dim).uniform_(-self.attn_dim**-0.5, self.attn_dim**-0.5))

    def precompute(self, keys: torch.Tensor, mask: torch.Tensor | Mask | None = None) -> torch.Tensor:
        """The keys' part of the score: h̄ (dot), W_a h̄ (general, (b, k, d_q)), W_k h̄ (concat, (b, k, d_a)).

        ``mask``: the (b, k) bool padding mask (or ``Mask.padding``); masked keys are zeroed first. With or without it, a
        key holding NaN or inf gives an all-NaN row without entering W_a (``map_finite_rows``), so
        where the forward's mask forbids it, it reaches neither the output nor W_a's gradient.
        """
        keys = mask_keys(keys, mask)
        return keys if self.score == "dot" else map_finite_rows(self._keys_part, keys)

    def _keys_part(self, keys: torch.Tensor) -> torch.Tensor:
        """W_a h̄ (general) or W_k h̄ (concat: the keys' columns of W) of finite keys (b, k, d_k)."""
        if self.score == "general":
            return self.weight(keys)
        return keys @ self.weight.weight[:, self.query_dim :].T

    def _score(self, projected: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The score (q, k) → (b, q, k) that the core calls; k is raw keys, or precompute(keys) if ``projected``."""
        s = _scores.default_scale(self.key_dim) if self.scale else 1.0
        if active():  # the readable reference, recording its steps
            ref = {"dot": lambda q, k: _scores.dot(q, k),
                   "general": lambda q, k: _scores.general(q, k, self.weight.weight),
                   "concat": lambda q, k: _scores.concat(q, k, self.weight.weight, self.v)}[self.score]
            return ref if s == 1.0 else (lambda q, k: self._scaled(ref(q, k), s))
        keys_part = (lambda pk: pk) if projected or self.score == "dot" else self._keys_part  # (keys the core zeroed)
        if self.score == "concat":
            w_q = self.weight.weight[:, : self.query_dim]
            return lambda q, k: chunked_additive_scores(q @ w_q.T, keys_part(k), self.v, max_elems=self.max_elems)
        if s == 1.0:
            return lambda q, k: q @ keys_part(k).transpose(-2, -1)  # (b, q, k)
        return lambda q, k: (q @ keys_part(k).transpose(-2, -1)) * s

    def _scaled(self, e: torch.Tensor, s: float) -> torch.Tensor:
        """Traced step: the scores scaled by s = 1/√d_k (recorded, so the weights are the softmax of a recorded step)."""
        scaled = _scores.scale_scores(e, s)
        record("scaled_scores", f"e_ij · {s:.6g}  (= 1/√d_k)", scaled, latex=r"e_{ij} / \sqrt{d_k}")
        return scaled

    forward = keyed_forward  # the decoder-side modules' one forward (nn._keyed)
    reads_projected = True  # projected_keys= (precompute(keys)) is read outside a trace

    @property
    def projected_width(self) -> int:
        """The width of ``precompute(keys)``: d_k (dot), d_q (general), d_a (concat)."""
        return {"dot": self.key_dim, "general": self.query_dim}.get(self.score) or self.attn_dim

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, score={self.score!r}, scale={self.scale}"


__all__ = ["LuongAttention"]
