"""``LinearAttention``: multi-head linear attention (Katharopoulos et al. 2020) as a module.

    [Q, K, V] = X W_qkvᵀ → h heads of d_h;  head_i = LinearAttn(Q_i, K_i, V_i) with φ = elu + 1
    y = concat(head_1 … head_h) W_oᵀ

(https://arxiv.org/abs/2006.16236; the arithmetic is ``attnlab.functional.linear``.)
``forward(x (b, n, dim), *, mask=None, causal=False, need_weights=False, state=None)``:
``mask`` a bool key-padding mask (b, 1, 1, n) (True = real token; also (b, n) when b != n)
or any mask that ``attnlab.masks.score_mask`` reads as broadcastable to (b, h, q, k); with ``state`` (a ``LinearState`` from the previous call, or ``LinearAttention.empty_state``)
the new tokens run through the recurrent form (causal, O(d_h²) memory per head) and the call
returns ``(y, state)`` instead of ``(y, weights)``.

| paper      | parameter                                              |
|------------|--------------------------------------------------------|
| W_Q; W_K; W_V | ``qkv`` (an ``nn.Linear(dim, 3·dim)``)              |
| W_O        | ``proj`` (an ``nn.Linear(dim, dim)``)                  |
| h, d_h     | ``num_heads``, ``head_dim = dim // num_heads``         |
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import _checks, masks
from ..functional.linear import LinearState, linear_attention, linear_attention_step
from ..functional.multihead import merge_heads, split_heads
from .padding import padded_queries, zero_padded
from .registry import register


@register("linear", functional=linear_attention, supports=("mask", "causal", "weights"))
class LinearAttention(nn.Module):
    """Multi-head linear attention with φ = elu + 1; a recurrent state for decoding."""

    def __init__(self, dim: int, num_heads: int = 8, *, qkv_bias: bool = False, proj_bias: bool = True):
        super().__init__()
        dim, num_heads = _checks.integer("dim", dim), _checks.integer("num_heads", num_heads)
        if dim % num_heads:
            raise ValueError(f"dim must be a positive multiple of num_heads; got dim={dim}, num_heads={num_heads}")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim, bias=proj_bias)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        state: LinearState | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | LinearState | None]:
        _checks.sequence_input(self, x, self.dim)
        pad_q = None
        if state is None:
            mask, padding = masks.score_mask(mask, x.shape[0], x.shape[1], x.shape[1])  # broadcastable to (b, h, n, n)
            x, pad_q = padded_queries(x, mask, padding)  # padded tokens: zero in, zero out
        q, k, v = (split_heads(t, self.num_heads) for t in self.qkv(x).chunk(3, dim=-1))  # (b, h, n, d_h)
        if state is not None:
            if mask is not None or need_weights:
                raise ValueError("the recurrent form (state=...) takes no mask and returns no weights")
            out, state = linear_attention_step(q, k, v, state)
            return self.proj(merge_heads(out)), state
        out, weights = linear_attention(q, k, v, mask=mask, causal=causal, need_weights=need_weights)
        return zero_padded(self.proj(merge_heads(out)), weights, pad_q)  # (b, n, dim), (b, h, q, k) or None

    def empty_state(
        self, batch: int, *, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> LinearState:
        """The state before the first token: S = 0 (b, h, d_h, d_h), z = 0 (b, h, d_h)."""
        batch = _checks.integer("batch", batch, 0)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise _checks.DtypeError(f"dtype must be a floating torch.dtype (or None for the module's); got {dtype!r}")
        w = self.qkv.weight
        kw: dict[str, Any] = {"device": device or w.device, "dtype": dtype or w.dtype}
        return LinearState(torch.zeros(batch, self.num_heads, self.head_dim, self.head_dim, **kw),
                           torch.zeros(batch, self.num_heads, self.head_dim, **kw))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}"


__all__ = ["LinearAttention"]
