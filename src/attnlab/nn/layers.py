"""Transformer encoder and decoder layers built from ``MultiHeadAttention``.

Vaswani et al. 2017, §3.1 (https://arxiv.org/abs/1706.03762); pre-norm: Xiong et al.
2020, "On Layer Normalization in the Transformer Architecture" (https://arxiv.org/abs/2002.04745).

    post-norm (the paper):  x = LN(x + Drop(SelfAttn(x)));       x = LN(x + Drop(FFN(x)))
    pre-norm  (GPT-2 on):   x = x + Drop(SelfAttn(LN(x)));       x = x + Drop(FFN(LN(x)))
    FFN(x) = W_2 Drop(act(W_1 x + b_1)) + b_2
    decoder: self-attention (causal), then cross-attention to the encoder's ``memory``, then FFN.

Submodule names follow ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
(``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1..3``), so weights
copy over from PyTorch's layers (tests do so). Unlike PyTorch's, masks use attnlab's
polarity (True = may attend), padding masks are (b, 1, 1, k) with True on real tokens
(a (b, k) mask is read by ``attnlab.masks.score_mask``: ambiguous when b = q), and the
decoder's self-attention takes a ``cache`` (a ``LayerCache``) for incremental decoding, whose
``memory`` slot keeps the cross-attention's projected memory keys and values from the first
step on (``MemoryCache``: reused while the same memory tensor is passed). Pre-norm stacks need
a final LayerNorm after the last layer (the models add it). Shapes: x (b, n, dim).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks
from ..mask import Mask
from .cache import LayerCache
from .multihead import MultiHeadAttention

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def _activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {name!r}")
    return ACTIVATIONS[name]



def _ffn_dim(dim: int, ffn_dim: int | None, dropout: float, layer_norm_eps: float) -> int:
    """Check a layer's sizes and rates (dim >= 1, ffn_dim >= 1 or None for 4·dim, dropout in [0, 1),
    layer_norm_eps > 0); return the feed-forward width."""
    dim = _checks.integer("dim", dim)
    _checks.probability("dropout", dropout)
    _checks.number("layer_norm_eps", layer_norm_eps, 0.0)
    return 4 * dim if ffn_dim is None else _checks.integer("ffn_dim", ffn_dim)


class _Layer(nn.Module):
    """What both layers hold besides their attention: FFN's ``linear1``, ``linear2``, its inner ``dropout``,
    ``norm1``, ``norm2`` and the sublayers' ``dropout1``, ``dropout2``; and the self-attention sublayer.
    The subclass makes ``self_attn`` (and ``multihead_attn``) first: the parameters come in PyTorch's order."""

    self_attn: MultiHeadAttention

    def _add_sublayers(self, dim: int, ffn_dim: int, *, dropout: float, activation: str, norm_first: bool,
                       layer_norm_eps: float, bias: bool) -> None:
        self.linear1 = nn.Linear(dim, ffn_dim, bias=bias)
        self.linear2 = nn.Linear(ffn_dim, dim, bias=bias)
        self.norm1 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.activation_name = activation
        self.norm_first = norm_first

    def _sa(
        self, x: torch.Tensor, mask: torch.Tensor | Mask | None, causal: bool, cache: LayerCache | None
    ) -> torch.Tensor:
        return self.dropout1(self.self_attn(x, mask=mask, causal=causal, cache=cache)[0])

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:
        """FFN(x) = W_2 Drop(act(W_1 x + b_1)) + b_2 (the sublayer's own dropout is the caller's)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class TransformerEncoderLayer(_Layer):
    """Self-attention + feed-forward, pre- or post-norm. ``forward(x, *, mask, causal, cache)``."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        num_kv_heads: int | None = None,
        bias: bool = True,
        rope: bool = False,
        alibi: bool = False,
    ):
        super().__init__()
        ffn_dim = _ffn_dim(dim, ffn_dim, dropout, layer_norm_eps)
        self.self_attn = MultiHeadAttention(
            dim, num_heads, num_kv_heads=num_kv_heads, qkv_bias=bias, proj_bias=bias,
            attn_drop=dropout, rope=rope, alibi=alibi,
        )
        self._add_sublayers(dim, ffn_dim, dropout=dropout, activation=activation, norm_first=norm_first,
                            layer_norm_eps=layer_norm_eps, bias=bias)

    def _ff(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout2(self._ffn(x))

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | Mask | None = None,
        causal: bool = False,
        cache: LayerCache | None = None,
    ) -> torch.Tensor:
        """x (b, n, dim) → (b, n, dim); mask (b, 1, 1, k) padding or broadcastable to (b, h, n, k)."""
        if isinstance(x, torch.Tensor):
            _checks.module_input(self, ("x",), (x,))
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask, causal, cache)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, mask, causal, cache))
        return self.norm2(x + self._ff(x))


class TransformerDecoderLayer(_Layer):
    """Causal self-attention, cross-attention to ``memory``, feed-forward; pre- or post-norm."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        ffn_dim: int | None = None,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_eps: float = 1e-5,
        num_kv_heads: int | None = None,
        memory_dim: int | None = None,
        bias: bool = True,
        rope: bool = False,
    ):
        super().__init__()
        ffn_dim = _ffn_dim(dim, ffn_dim, dropout, layer_norm_eps)
        self.self_attn = MultiHeadAttention(
            dim, num_heads, num_kv_heads=num_kv_heads, qkv_bias=bias, proj_bias=bias, attn_drop=dropout, rope=rope
        )
        self.multihead_attn = MultiHeadAttention(
            dim, num_heads, kdim=memory_dim, vdim=memory_dim, num_kv_heads=num_kv_heads,
            qkv_bias=bias, proj_bias=bias, attn_drop=dropout,
        )
        self._add_sublayers(dim, ffn_dim, dropout=dropout, activation=activation, norm_first=norm_first,
                            layer_norm_eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.dropout3 = nn.Dropout(dropout)

    def _ca(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | Mask | None,
        need_weights: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mem = None if cache is None else cache.memory  # the memory's keys and values, projected once
        out, weights = self.multihead_attn(x, memory, mask=memory_mask, need_weights=need_weights, cache=mem)
        return self.dropout2(out), weights

    def _ff(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout3(self._ffn(x))

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        *,
        mask: torch.Tensor | Mask | None = None,
        memory_mask: torch.Tensor | Mask | None = None,
        causal: bool = True,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, t, dim), memory (b, s, memory_dim) → (b, t, dim).

        mask: self-attention mask ((b, 1, 1, t) padding or broadcastable to (b, h, t, t));
        memory_mask: (b, 1, 1, s) padding of the source or broadcastable to (b, h, t, s).
        ``need_weights=True`` returns ``(x, cross-attention weights (b, h, t, s))``.
        """
        if isinstance(x, torch.Tensor) and isinstance(memory, torch.Tensor):
            _checks.module_input(self, ("x", "memory"), (x, memory))
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask, causal, cache)
            ca, w = self._ca(self.norm2(x), memory, memory_mask, need_weights, cache)
            x = x + ca
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + self._sa(x, mask, causal, cache))
            ca, w = self._ca(x, memory, memory_mask, need_weights, cache)
            x = self.norm2(x + ca)
            x = self.norm3(x + self._ff(x))
        return (x, w) if need_weights else x


__all__ = ["TransformerEncoderLayer", "TransformerDecoderLayer", "ACTIVATIONS"]
