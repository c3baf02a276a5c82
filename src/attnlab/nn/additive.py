"""Additive (Bahdanau) attention as a module, memory-bounded.

    e_tj = vᵀ tanh(W_q s_t + W_k h_j)     α_t = softmax(e_t)     c_t = Σ_j α_tj h_j

Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning to
Align and Translate", https://arxiv.org/abs/1409.0473 (appendix A.1.2: the
alignment model a(s_{i-1}, h_j) = v_aᵀ tanh(W_a s_{i-1} + U_a h_j)).

| paper / seeds        | here                          | shape        |
|----------------------|-------------------------------|--------------|
| s_{t-1} (s_t)        | ``query``                     | (b, d_q) or (b, q, d_q) |
| h_j                  | rows of ``keys`` (and values) | (b, k, d_k)  |
| W_a, W_1, W_s        | ``w_q.weight``                | (d_a, d_q)   |
| U_a, W_2, W_h        | ``w_k.weight``                | (d_a, d_k)   |
| v_a, v               | ``v``                         | (d_a,)       |

``precompute(keys)`` returns U_a h_j once per source sentence; pass it as
``projected_keys=`` at every decoding step to skip that matmul.

Two paths: the default runs the chunked kernel
(``attnlab.kernels.chunked_additive``), which never holds the
``(b, q, k, d_a)`` tensor; while ``attnlab.trace()`` records, or with
``impl="reference"``, the readable ``attnlab.scores.additive`` runs and records
its steps. Both give the same numbers (tested). Weights always go through
``attnlab.masked_softmax``: a fully masked row gets zero weights and context.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from ..functional import scores as _scores
from ..functional.attention import ScoreFn
from ..functional.nonfinite import map_finite_rows
from ..kernels.chunked_additive import DEFAULT_MAX_ELEMS, chunked_additive_scores
from ..mask import Mask
from ..trace import active
from ._keyed import keyed_forward, mask_keys
from .registry import register

IMPLS = ("chunked", "reference")


@register("bahdanau", aliases=("additive",), functional=_scores.additive, supports=("mask", "weights"))
class AdditiveAttention(nn.Module):
    """Bahdanau attention: ``AdditiveAttention(query_dim, key_dim, attn_dim)``."""

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        attn_dim: int,
        *,
        impl: str = "chunked",
        max_elems: int = DEFAULT_MAX_ELEMS,
    ):
        super().__init__()
        for name, val in (("query_dim", query_dim), ("key_dim", key_dim), ("attn_dim", attn_dim)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"{name} must be a positive int; got {val!r}")
        max_elems = _checks.integer("max_elems", max_elems)
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}; got {impl!r}")
        self.query_dim, self.key_dim, self.attn_dim = query_dim, key_dim, attn_dim
        self.impl, self.max_elems = impl, max_elems
        self.w_q = nn.Linear(query_dim, attn_dim, bias=False)
        self.w_k = nn.Linear(key_dim, attn_dim, bias=False)
        self.v = nn.Parameter(torch.empty(attn_dim).uniform_(-attn_dim**-0.5, attn_dim**-0.5))

    def precompute(self, keys: torch.Tensor, mask: torch.Tensor | Mask | None = None) -> torch.Tensor:
        """W_k h_j for every key: (b, k, d_k) → (b, k, d_a). Reuse it at every decoding step.

        ``mask``: the (b, k) bool padding mask (or ``Mask.padding``); masked keys are zeroed first. With or without it, a
        key holding NaN or inf gives an all-NaN row without entering W_k (``map_finite_rows``), so
        where the forward's mask forbids it, it reaches neither the output nor W_k's gradient.
        """
        return map_finite_rows(self.w_k, mask_keys(keys, mask))

    def _score(self, projected: bool) -> ScoreFn:
        """The score (q, k) → (b, q, k) that the core calls; k is raw keys, or precompute(keys) if ``projected``."""
        w_q, v = self.w_q.weight, self.v
        if active() or self.impl == "reference":  # the readable reference, recording its steps
            return lambda q, k: _scores.additive(q, k, w_q, self.w_k.weight, v)
        keys_part = (lambda wk: wk) if projected else self.w_k  # raw keys: the core has zeroed non-finite ones
        return lambda q, k: chunked_additive_scores(self.w_q(q), keys_part(k), v, max_elems=self.max_elems)

    forward = keyed_forward  # the decoder-side modules' one forward (nn._keyed)

    @property
    def reads_projected(self) -> bool:
        """projected_keys= (precompute(keys)) is read by the chunked path outside a trace."""
        return self.impl != "reference"

    @property
    def projected_width(self) -> int:
        return self.attn_dim

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, attn_dim={self.attn_dim}, impl={self.impl!r}"


__all__ = ["AdditiveAttention"]
