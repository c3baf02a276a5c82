"""Multi-head self-attention restricted to a sparse pattern: local, Longformer, BigBird.

    [q, k, v] = x W_qkvᵀ              (b, n, 3·dim) → 3 × (b, h, n, d),  d = dim / h
    o_h = softmax_S(q_h k_hᵀ / √d) v_h   only over the pairs S the pattern allows
    y = concat_h(o_h) W_oᵀ + b_o

The attention runs in ``attnlab.kernels.block_sparse_attention``, which
computes only the tiles the pattern touches, so a window of w keys costs
O(n·w) time and memory, forward and backward.

============================  ===========================================================  =========================
module                        pattern                                                      paper
============================  ===========================================================  =========================
``LocalAttention``            ``sliding_window(window, 0 if causal else window)``          local attention (seed 001)
``SparseAttention``           any ``attnlab.patterns`` pattern                             Child et al. 2019
``LongformerAttention``       ``sliding_window(window) | global_tokens(global_indices)``   Beltagy et al. 2020
``BigBirdAttention``          window ``|`` global ``|`` ``random_blocks(random_per_row)``  Zaheer et al. 2020
============================  ===========================================================  =========================

Papers: https://arxiv.org/abs/1904.10509, https://arxiv.org/abs/2004.05150,
https://arxiv.org/abs/2007.14062.

Constructor names follow timm's ``Attention`` (``dim``, ``num_heads``,
``qkv_bias``, ``attn_drop``, ``proj_drop``); the fused ``qkv`` Linear holds
W_q, W_k, W_v stacked in that order, in ``torch.nn.Linear`` layout.
``forward(x, *, mask=None, need_weights=False)``: ``mask`` is a (b, n) or
(b, 1, 1, n) bool padding mask (True = real token); ``need_weights=True``
also returns the dense (b, h, n, n) weights (for small n: that tensor is n²).
Caveat: Longformer's separate projections for global tokens and BigBird's
ITC/ETC variants are not modelled; all tokens share one projection.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..kernels.block_sparse import block_sparse_attention, weights_for_rows
from ..patterns import Pattern, global_tokens, random_blocks, sliding_window
from .registry import register


def _padding(mask: torch.Tensor | None, b: int, n: int) -> torch.Tensor | None:
    if mask is None:
        return None
    if mask.dtype != torch.bool or not (
        (mask.dim() == 2 and tuple(mask.shape) == (b, n)) or (mask.dim() == 4 and tuple(mask.shape) == (b, 1, 1, n))
    ):
        raise ValueError(
            f"mask must be a bool padding mask (b, n) = ({b}, {n}) or (b, 1, 1, n), True = real token; "
            f"got shape {tuple(mask.shape)} dtype {mask.dtype}"
        )
    return mask.reshape(b, n)


@register("sparse")
class SparseAttention(nn.Module):
    """Multi-head self-attention over the pairs ``pattern`` allows (any ``attnlab.patterns`` pattern)."""

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        pattern: Pattern,
        qkv_bias: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        block: int = 64,
    ):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim must be divisible by num_heads; got dim={dim}, num_heads={num_heads}")
        if not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.pattern, self.block, self.attn_drop = pattern, block, attn_drop
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)  # W_q, W_k, W_v stacked
        self.proj = nn.Linear(dim, dim)  # W_o
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, n, dim) → (y (b, n, dim), weights (b, h, n, n) or None)."""
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must be (b, n, dim) with dim={self.dim}; got shape {tuple(x.shape)}")
        b, n, _ = x.shape
        pad = _padding(mask, b, n)
        # 1. project and split the heads
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (b, h, n, d)
        # 2. attend, tile by tile
        p = self.attn_drop if self.training else 0.0
        o, _ = block_sparse_attention(q, k, v, self.pattern, block=self.block, key_padding_mask=pad, dropout_p=p)
        weights = None
        if need_weights:
            weights = weights_for_rows(q, k, self.pattern, torch.arange(n, device=x.device), key_padding_mask=pad)
        # 3. merge the heads and project
        y = self.proj_drop(self.proj(o.transpose(1, 2).reshape(b, n, self.dim)))  # (b, n, dim)
        return y, weights

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, pattern={self.pattern!r}, block={self.block}"


@register("local")
class LocalAttention(SparseAttention):
    """Each position attends the ``window`` positions on each side (only before it if ``causal``)."""

    def __init__(self, dim: int, num_heads: int = 8, *, window: int = 64, causal: bool = False, **kw):
        super().__init__(dim, num_heads, pattern=sliding_window(window, 0 if causal else window), **kw)


@register("longformer")
class LongformerAttention(SparseAttention):
    """Longformer: a sliding window of ``window`` each side plus global tokens that see and are seen by all."""

    def __init__(
        self, dim: int, num_heads: int = 8, *, window: int = 64, global_indices: Sequence[int] = (0,), **kw
    ):
        super().__init__(dim, num_heads, pattern=sliding_window(window) | global_tokens(global_indices), **kw)


@register("bigbird")
class BigBirdAttention(SparseAttention):
    """BigBird: window + global tokens + ``random_per_row`` random key blocks per query block."""

    def __init__(
        self,
        dim: int,
        num_heads: int = 8,
        *,
        window: int = 64,
        global_indices: Sequence[int] = (0,),
        random_per_row: int = 2,
        random_block: int = 64,
        seed: int = 0,
        **kw,
    ):
        pattern = sliding_window(window) | global_tokens(global_indices) | random_blocks(random_per_row, random_block, seed)
        super().__init__(dim, num_heads, pattern=pattern, **kw)


__all__ = ["SparseAttention", "LocalAttention", "LongformerAttention", "BigBirdAttention"]
