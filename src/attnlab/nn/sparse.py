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
``LocalAttention``            ``sliding_window(window, 0 if causal else window)``          the second tutorial (§5.2)
``SparseAttention``           any ``attnlab.patterns`` pattern                             Child et al. 2019
``LongformerAttention``       ``sliding_window(window) | global_tokens(global_indices)``   Beltagy et al. 2020
``BigBirdAttention``          window ``|`` global ``|`` ``random_blocks(random_per_row)``  Zaheer et al. 2020
============================  ===========================================================  =========================

Papers: https://arxiv.org/abs/1904.10509, https://arxiv.org/abs/2004.05150,
https://arxiv.org/abs/2007.14062.

These are ``attnlab.nn.MultiHeadAttention`` with a ``BlockSparse(pattern)`` backend: the same
parameters (``in_proj_weight`` W_q; W_k; W_v stacked, ``in_proj_bias`` when
``qkv_bias``, ``out_proj``), the same ``forward(x, *, mask=None, causal=False,
need_weights=False)``. ``mask`` is a (b, n) or (b, 1, 1, n) bool padding mask
(True = real token); ``need_weights=True`` also returns the dense (b, h, n, n)
weights (for small n: that tensor is n²). ``qkv_bias`` defaults to False here,
as in timm's ``Attention``.
Caveat: Longformer's separate projections for global tokens and BigBird's
ITC/ETC variants are not modelled; all tokens share one projection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..patterns import Pattern, global_tokens, random_blocks, sliding_window
from .backends import BlockSparse
from .multihead import MultiHeadAttention
from .registry import register


@register("sparse", supports=("mask", "causal", "weights"))
class SparseAttention(MultiHeadAttention):
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
        **kw: Any,
    ):
        if not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        super().__init__(
            dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop,
            backend=BlockSparse(pattern, block=block), **kw
        )


@register("local", supports=("mask", "causal", "weights"))
class LocalAttention(SparseAttention):
    """Each position attends the ``window`` positions on each side (only before it if ``causal``)."""

    def __init__(self, dim: int, num_heads: int = 8, *, window: int = 64, causal: bool = False, **kw: Any):
        super().__init__(dim, num_heads, pattern=sliding_window(window, 0 if causal else window), **kw)


@register("longformer", supports=("mask", "causal", "weights"))
class LongformerAttention(SparseAttention):
    """Longformer: a sliding window of ``window`` each side plus global tokens that see and are seen by all."""

    def __init__(
        self, dim: int, num_heads: int = 8, *, window: int = 64, global_indices: Sequence[int] = (0,), **kw: Any
    ):
        super().__init__(dim, num_heads, pattern=sliding_window(window) | global_tokens(global_indices), **kw)


@register("bigbird", supports=("mask", "causal", "weights"))
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
        **kw: Any,
    ):
        pattern = sliding_window(window) | global_tokens(global_indices) | random_blocks(random_per_row, random_block, seed)
        super().__init__(dim, num_heads, pattern=pattern, **kw)


__all__ = ["SparseAttention", "LocalAttention", "LongformerAttention", "BigBirdAttention"]
