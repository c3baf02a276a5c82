"""``SoftcapAttention``: scaled dot-product attention with Gemma 2's logit soft-cap, as a module.

    α = softmax(c · tanh(q kᵀ · scale / c) + mask),  o = α v

(Gemma Team 2024, https://arxiv.org/abs/2408.00118.) A thin module over
``attnlab.functional.softcap.softcap_attention``; no parameters. ``cap`` is the
paper's soft-cap value (50.0 for attention logits). Shapes: query (..., q, d),
key (..., k, d), value (..., k, d_v) → (..., q, d_v), weights (..., q, k).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import _checks
from ..functional.softcap import check_cap, softcap_attention
from ._signature import core_forward
from .registry import register


@register("softcap", functional=softcap_attention, supports=("mask", "causal", "weights"))
class SoftcapAttention(nn.Module):
    """Soft-capped scaled dot-product attention (``cap`` c, ``scale`` default 1/√d)."""

    def __init__(self, *, cap: float = 50.0, scale: float | None = None, attn_drop: float = 0.0):
        super().__init__()
        scale = None if scale is None else _checks.scale(scale)
        self.cap, self.scale, self.attn_drop = check_cap(cap), scale, _checks.probability("attn_drop", attn_drop)

    forward = core_forward  # the classic modules' one forward (nn._signature)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               **core: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return softcap_attention(query, key, value, cap=self.cap, scale=self.scale, **core)

    def extra_repr(self) -> str:
        return f"cap={self.cap}, scale={self.scale}"


__all__ = ["SoftcapAttention"]
