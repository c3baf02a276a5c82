"""``NeighborhoodAttention2D``: neighbourhood attention over (b, C, H, W) feature maps (NAT / DiNAT).

Hassani et al. 2023, https://arxiv.org/abs/2204.07143 (dilated: https://arxiv.org/abs/2209.15001);
the attention is ``attnlab.kernels.neighborhood_attention_2d`` (block-sparse kernel).

    x (b, C, H, W) → tokens (b, H·W, C) → [Q, K, V] = x W_qkvᵀ → h heads of d_h = C / h
    o = NA_k,δ(Q, K, V)  (each pixel over its k × k window, NATTEN border semantics)
    y = concat_h(o) W_oᵀ → (b, C, H, W)

| paper / NATTEN   | parameter                                      |
|------------------|------------------------------------------------|
| W_qkv, W_o       | ``qkv`` (``nn.Linear(C, 3C)``), ``proj`` (``nn.Linear(C, C)``) |
| kernel size, δ   | ``kernel_size``, ``dilation``                  |
| heads            | ``num_heads``                                  |

``forward(x, *, need_weights=False) → (y (b, C, H, W), weights (b, h, H·W, H·W) or None)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from ..kernels.neighborhood import neighborhood_attention_2d
from .registry import register


@register("neighborhood-2d", aliases=("neighborhood",), functional=neighborhood_attention_2d, supports=("weights",))
class NeighborhoodAttention2D(nn.Module):
    """2-D neighbourhood self-attention on a (b, C, H, W) map."""

    def __init__(self, dim: int, num_heads: int = 4, *, kernel_size: int = 7, dilation: int = 1,
                 qkv_bias: bool = True, block: int = 64):
        super().__init__()
        for name, value in (("dim", dim), ("num_heads", num_heads), ("kernel_size", kernel_size), ("dilation", dilation),
                            ("block", block)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an integer; got {value!r}")
        if dim < 1 or num_heads < 1 or dim % num_heads:
            raise ValueError(f"dim (channels C) must be a positive multiple of num_heads; got dim={dim}, num_heads={num_heads}")
        if kernel_size < 1 or kernel_size % 2 == 0 or dilation < 1:
            raise ValueError(f"kernel_size must be odd and >= 1, dilation >= 1; got {kernel_size}, {dilation}")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.kernel_size, self.dilation, self.block = kernel_size, dilation, block
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        if _checks.tensor("x", x).dim() != 4 or x.shape[1] != self.dim:
            raise ValueError(f"x must be a (b, C, H, W) map with C={self.dim}; got shape {tuple(x.shape)}")
        _checks.module_input(self, ("x",), (x,))
        b, C, H, W = x.shape
        tokens = x.permute(0, 2, 3, 1)  # (b, H, W, C)
        qkv = self.qkv(tokens).view(b, H, W, 3, self.num_heads, self.head_dim).permute(3, 0, 4, 1, 2, 5)  # (3, b, h, H, W, d_h)
        out, weights = neighborhood_attention_2d(
            qkv[0], qkv[1], qkv[2], kernel=self.kernel_size, dilation=self.dilation, block=self.block, need_weights=need_weights
        )  # (b, h, H, W, d_h)
        y = self.proj(out.permute(0, 2, 3, 1, 4).reshape(b, H, W, C))  # (b, H, W, C)
        return y.permute(0, 3, 1, 2), weights

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, kernel_size={self.kernel_size}, dilation={self.dilation}"


__all__ = ["NeighborhoodAttention2D"]
