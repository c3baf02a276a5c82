"""``DifferentialAttention``: the Differential Transformer's multi-head attention (Ye et al. 2024).

https://arxiv.org/abs/2410.05258; the arithmetic is ``attnlab.functional.differential``.

    [Q_1; Q_2] = X W_qᵀ, [K_1; K_2] = X W_kᵀ   (2h heads of d_h),   V = X W_vᵀ   (h heads of 2·d_h)
    head_i = (1 − λ_init) · RMSNorm((softmax(Q_1i K_1iᵀ/√d_h) − λ softmax(Q_2i K_2iᵀ/√d_h)) V_i)
    y = concat(head_1 … head_h) W_oᵀ

The paper's layout: h = ``num_heads`` differential heads, d_h = dim / (2h); the query and key
heads come in pairs (2i, 2i + 1) = (Q_1, Q_2) of head i, as in the authors' code and timm.

| paper                     | parameter                                       |
|---------------------------|-------------------------------------------------|
| W^Q, W^K, W^V             | ``q_proj``, ``k_proj``, ``v_proj`` (``nn.Linear(dim, dim)``) |
| W^O                       | ``out_proj``                                    |
| λ_q1, λ_k1, λ_q2, λ_k2    | ``lambda_q1`` … ``lambda_k2`` (d_h,), init N(0, 0.1²) |
| λ_init, l                 | ``lambda_init`` (a float), ``depth`` = l − 1    |
| GroupNorm (per head)      | ``sub_norm`` (``nn.RMSNorm(2·d_h)``, shared by the heads) |

Shapes: x (b, n, dim) → (b, n, dim); weights (b, h, q, k) = A_1 − λ A_2. ``mask``: a (b, 1, 1, n)
key-padding mask (also (b, n) when b != n) or any mask that ``attnlab.masks.score_mask`` reads as
broadcastable to (b, h, q, k) (bool True = may attend).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks, masks
from ..functional.differential import differential_attention, lambda_init, reparam_lambda
from ..functional.multihead import merge_heads, split_heads
from .padding import padded_queries, zero_padded
from .registry import register


@register("differential", functional=differential_attention, supports=("mask", "causal", "weights"))
class DifferentialAttention(nn.Module):
    """Differential multi-head self-attention; ``depth`` is the layer's 0-based index (sets λ_init)."""

    # the λ reparameterisation, (d_h,) each (set in __init__ with setattr)
    lambda_q1: nn.Parameter
    lambda_k1: nn.Parameter
    lambda_q2: nn.Parameter
    lambda_k2: nn.Parameter

    def __init__(self, dim: int, num_heads: int = 4, *, depth: int = 0, qkv_bias: bool = False, attn_drop: float = 0.0):
        super().__init__()
        dim, num_heads = _checks.integer("dim", dim), _checks.integer("num_heads", num_heads)
        attn_drop = _checks.probability("attn_drop", attn_drop)
        if dim % (2 * num_heads):
            raise ValueError(f"dim must be a positive multiple of 2·num_heads; got dim={dim}, num_heads={num_heads}")
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads // 2
        self.attn_drop = attn_drop
        self.q_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.k_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.v_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.out_proj = nn.Linear(dim, dim)
        self.lambda_init = lambda_init(depth)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.randn(self.head_dim) * 0.1))
        self.sub_norm = nn.RMSNorm(2 * self.head_dim, eps=1e-5)

    def lam(self) -> torch.Tensor:
        """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init (a scalar tensor)."""
        return reparam_lambda(self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2, self.lambda_init)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, causal: bool = False, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _checks.sequence_input(self, x, self.dim)
        b, n, _ = x.shape
        h, d = self.num_heads, self.head_dim
        mask, padding = masks.score_mask(mask, b, n, n)  # broadcastable to (b, h, n, n)
        x, pad_q = padded_queries(x, mask, padding)  # padded tokens: zero input, zero output
        q = split_heads(self.q_proj(x), 2 * h).view(b, h, 2, n, d)  # (b, h, 2, n, d_h): Q_1, Q_2 of each head
        k = split_heads(self.k_proj(x), 2 * h).view(b, h, 2, n, d)
        v = split_heads(self.v_proj(x), h)  # (b, h, n, 2·d_h)
        out, weights = differential_attention(
            q[:, :, 0], k[:, :, 0], q[:, :, 1], k[:, :, 1], v, self.lam(), mask=mask, causal=causal,
            dropout_p=self.attn_drop if self.training else 0.0, need_weights=need_weights,
        )  # (b, h, n, 2·d_h)
        out = self.sub_norm(out) * (1 - self.lambda_init)  # per-head normalisation
        return zero_padded(self.out_proj(merge_heads(out)), weights, pad_q)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, lambda_init={self.lambda_init:.4f}"


__all__ = ["DifferentialAttention"]
