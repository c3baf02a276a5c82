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
from ..functional.nonfinite import map_finite_rows
from ..kernels.chunked_additive import DEFAULT_MAX_ELEMS, chunked_additive_scores
from ..trace import active
from ._keyed import check_projected, finish, mask_keys, prepare
from ._signature import classic_forward
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

    def precompute(self, keys: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """W_k h_j for every key: (b, k, d_k) → (b, k, d_a). Reuse it at every decoding step.

        ``mask``: the (b, k) bool padding mask; masked keys are zeroed first. With or without it, a
        key holding NaN or inf gives an all-NaN row without entering W_k (``map_finite_rows``), so
        where the forward's mask forbids it, it reaches neither the output nor W_k's gradient.
        """
        return map_finite_rows(self.w_k, mask_keys(keys, mask))

    @classic_forward
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
        projected_keys: torch.Tensor | None = None,
        kv_finite: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (b, d_q) | (b, q, d_q), key (b, k, d_k), value (b, k, d_v) (default: the keys),
        mask (b, k) | (b, q, k) → (context, weights or None).

        ``kv_finite=True``: the caller vouches that keys, values (and ``projected_keys``) hold no
        NaN or inf at masked positions, so the core skips its per-call passes over them
        (``attnlab.attention``'s flag; a decoder whose memory's padding is zero by construction).
        """
        query, values, mask, single = prepare(query, key, value, mask)
        _checks.module_input(self, ("query", "keys"), (query, key))
        w_q, v = self.w_q.weight, self.v
        if active() or self.impl == "reference":
            score = lambda q, k: _scores.additive(q, k, w_q, self.w_k.weight, v)  # noqa: E731  (records its steps)
            return finish(query, key, values, score, mask, single, need_weights, kv_finite)
        chunk = self.max_elems
        if projected_keys is None:  # project inside the score: the core has zeroed non-finite keys
            score = lambda q, k: chunked_additive_scores(self.w_q(q), self.w_k(k), v, max_elems=chunk)  # noqa: E731
            return finish(query, key, values, score, mask, single, need_weights, kv_finite)
        check_projected(projected_keys, key, self.attn_dim)
        score = lambda q, wk: chunked_additive_scores(self.w_q(q), wk, v, max_elems=chunk)  # noqa: E731
        return finish(query, projected_keys, values, score, mask, single, need_weights, kv_finite)

    def extra_repr(self) -> str:
        return f"query_dim={self.query_dim}, key_dim={self.key_dim}, attn_dim={self.attn_dim}, impl={self.impl!r}"


__all__ = ["AdditiveAttention"]
