"""``MultiHeadLatentAttention`` (MLA, DeepSeek-V2) and its ``LatentCache`` of compressed key/values.

https://arxiv.org/abs/2405.04434 §2.1; the attention is ``attnlab.functional.latent.latent_attention``.

    c^Q = RMSNorm(W^DQ x),  q^C = W^UQ c^Q,  q^R = RoPE(W^QR c^Q)        (queries; no W^DQ when q_latent_dim=None)
    c^KV = RMSNorm(W^DKV x), k^R = RoPE(W^KR x)                           (cached per token: d_c + d_R numbers)
    o = latent_attention(q^C, q^R, c^KV, k^R, W^UK, W^UV),  y = W^O concat(o)

| paper        | parameter                                         | transformers' DeepSeek-V2 |
|--------------|---------------------------------------------------|---------------------------|
| W^DQ, W^UQ   | ``w_dq`` (d_c', dim), ``w_uq`` (h·d_h, d_c')       | q_a_proj, q_b_proj        |
| W^QR         | ``w_qr`` (h·d_R, d_c')                             | (part of q_b_proj)        |
| W^DKV, W^KR  | ``w_dkv`` (d_c, dim), ``w_kr`` (d_R, dim)          | kv_a_proj_with_mqa        |
| W^UK, W^UV   | ``w_uk`` (h·d_h, d_c), ``w_uv`` (h·d_v, d_c)       | kv_b_proj                 |
| W^O          | ``out_proj`` (dim, h·d_v)                          | o_proj                    |
| d_c, d_c', d_R, d_h | ``kv_latent_dim``, ``q_latent_dim``, ``rope_dim``, ``head_dim`` |          |

Shapes: x (b, n, dim) → (b, n, dim); weights (b, h, q, k). Positions: the rotary key k^R is
rotated before caching, at its absolute position (``cache.length`` is the offset), as in
``attnlab.nn.MultiHeadAttention``. The norms follow DeepSeek-V2 (RMSNorm on both latents).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks, masks
from ..functional.latent import latent_attention
from ..functional.multihead import merge_heads, split_heads
from ..functional.nonfinite import map_finite_rows
from .padding import padded_queries, zero_padded
from .positional import RotaryEmbedding
from .registry import register


class LatentCache:
    """The cached latents c^KV (b, n, d_c) and rotary keys k^R (b, n, d_R) of one MLA layer."""

    def __init__(self) -> None:
        self.c_kv: torch.Tensor | None = None
        self.k_rope: torch.Tensor | None = None
        self.length = 0

    def update(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (b, n, d_c) and (b, n, d_R); return everything cached."""
        if self.c_kv is not None and (self.c_kv.shape[0] != c_kv.shape[0] or self.c_kv.shape[-1] != c_kv.shape[-1]):
            raise ValueError(f"new latents {tuple(c_kv.shape)} do not fit the cached {tuple(self.c_kv.shape)}; call reset()")
        self.c_kv = c_kv if self.c_kv is None else torch.cat([self.c_kv, c_kv], 1)
        self.k_rope = k_rope if self.k_rope is None else torch.cat([self.k_rope, k_rope], 1)
        self.length += c_kv.shape[1]
        return self.c_kv, self.k_rope

    def nbytes(self) -> int:
        """Bytes held: (d_c + d_R) · element size per token and sequence."""
        return sum(t.numel() * t.element_size() for t in (self.c_kv, self.k_rope) if t is not None)

    def reset(self) -> None:
        self.c_kv = self.k_rope = None
        self.length = 0

    def __repr__(self) -> str:
        return f"LatentCache(length={self.length})"


@register("mla", aliases=("latent",), functional=latent_attention, supports=("mask", "causal", "weights"))
class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention with a decoupled rotary part and a latent KV cache."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        kv_latent_dim: int,
        q_latent_dim: int | None = None,
        head_dim: int | None = None,
        rope_dim: int | None = None,
        v_head_dim: int | None = None,
        rope_base: float = 10000.0,
        attn_drop: float = 0.0,
    ):
        super().__init__()
        dim, num_heads, kv_latent_dim = (_checks.integer(n, v) for n, v in (
            ("dim", dim), ("num_heads", num_heads), ("kv_latent_dim", kv_latent_dim)))
        q_latent_dim, head_dim, v_head_dim = (_checks.optional_integer(n, v) for n, v in (
            ("q_latent_dim", q_latent_dim), ("head_dim", head_dim), ("v_head_dim", v_head_dim)))
        rope_dim = None if rope_dim is None else _checks.even("rope_dim", rope_dim)
        attn_drop = _checks.probability("attn_drop", attn_drop)
        d_h = head_dim or dim // num_heads
        d_r = rope_dim if rope_dim is not None else max(2, d_h // 2)
        d_v = v_head_dim or d_h
        if d_h < 1 or d_r < 2 or d_r % 2:
            raise ValueError(f"head_dim must be >= 1 and rope_dim even and >= 2; got head_dim={d_h}, rope_dim={d_r}")
        self.dim, self.num_heads, self.head_dim, self.rope_dim, self.v_head_dim = dim, num_heads, d_h, d_r, d_v
        self.kv_latent_dim, self.q_latent_dim, self.attn_drop = kv_latent_dim, q_latent_dim, attn_drop
        d_q = q_latent_dim or dim
        self.w_dq = nn.Linear(dim, q_latent_dim, bias=False) if q_latent_dim else None
        self.q_norm = nn.RMSNorm(q_latent_dim, eps=1e-6) if q_latent_dim else None
        self.w_uq = nn.Linear(d_q, num_heads * d_h, bias=False)
        self.w_qr = nn.Linear(d_q, num_heads * d_r, bias=False)
        self.w_dkv = nn.Linear(dim, kv_latent_dim, bias=False)
        self.kv_norm = nn.RMSNorm(kv_latent_dim, eps=1e-6)
        self.w_kr = nn.Linear(dim, d_r, bias=False)
        self.w_uk = nn.Linear(kv_latent_dim, num_heads * d_h, bias=False)
        self.w_uv = nn.Linear(kv_latent_dim, num_heads * d_v, bias=False)
        self.out_proj = nn.Linear(num_heads * d_v, dim, bias=False)
        self.rotary = RotaryEmbedding(d_r, base=rope_base)

    def cache_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """(d_c + d_R) · element size: what ``LatentCache`` holds per token and sequence."""
        return (self.kv_latent_dim + self.rope_dim) * torch.empty((), dtype=dtype).element_size()

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: LatentCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, n, dim) → ``(y (b, n, dim), weights (b, h, n, k) or None)``; ``mask`` a (b, 1, 1, k)
        key-padding mask (k counts cached tokens too; also (b, k) when b != n) or any mask that
        ``attnlab.masks.score_mask`` reads as broadcastable to (b, h, n, k)."""
        _checks.sequence_input(self, x, self.dim)
        h = self.num_heads
        offset = 0 if cache is None else cache.length
        mask, padding = masks.score_mask(mask, x.shape[0], x.shape[1], offset + x.shape[1])  # (b|1, 1|h, q|1, k)
        x, pad_q = padded_queries(x, mask, padding) if cache is None else (x, None)  # padded: zero in, zero out
        c_q = x if self.w_dq is None or self.q_norm is None else map_finite_rows(self.q_norm, self.w_dq(x))  # (b, n, d_c')
        q_c = split_heads(self.w_uq(c_q), h)  # (b, h, n, d_h)
        q_r = self.rotary(split_heads(self.w_qr(c_q), h), offset)  # (b, h, n, d_R)
        c_kv = map_finite_rows(self.kv_norm, self.w_dkv(x))  # (b, n, d_c)   cached
        k_r = self.rotary(self.w_kr(x).unsqueeze(1), offset)[:, 0]  # (b, n, d_R)   cached, already rotated
        if cache is not None:
            c_kv, k_r = cache.update(c_kv, k_r)  # (b, k, d_c), (b, k, d_R)
        if causal and x.shape[1] == 1:
            causal = False  # one query at the end of the keys may attend them all
        heads, weights = latent_attention(
            q_c, q_r, c_kv, k_r, self.w_uk.weight, self.w_uv.weight, num_heads=h, mask=mask, causal=causal,
            dropout_p=self.attn_drop if self.training else 0.0, need_weights=need_weights,
        )  # (b, h, n, d_v)
        return zero_padded(self.out_proj(merge_heads(heads)), weights, pad_q)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, kv_latent_dim={self.kv_latent_dim}, "
                f"q_latent_dim={self.q_latent_dim}, head_dim={self.head_dim}, rope_dim={self.rope_dim}")


__all__ = ["MultiHeadLatentAttention", "LatentCache"]
