"""Parameter-free dot-product attention as a module (Luong "dot"; Vaswani's scaled dot).

    α = softmax(q kᵀ · scale + mask),  c = α v

A thin ``nn.Module`` over ``attnlab.attention`` so the parameter-free scores sit
in the registry beside the learned ones. Shapes: query (..., q, d), key
(..., k, d), value (..., k, d_v) → (..., q, d_v), weights (..., q, k).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import _checks
from ..functional.attention import attention
from ._signature import core_forward
from .registry import register


@register("dot", functional=attention, scaled=False, supports=("mask", "causal", "weights"))
@register("scaled-dot", functional=attention, scaled=True, supports=("mask", "causal", "weights"))
class DotProductAttention(nn.Module):
    """``scaled=True``: e = qᵀk/√d (or ``scale``); ``scaled=False``: e = qᵀk."""

    def __init__(self, *, scaled: bool = True, scale: float | None = None, attn_drop: float = 0.0):
        super().__init__()
        if scale is not None and not scaled:
            raise ValueError("scale applies only with scaled=True")
        scale = None if scale is None else _checks.scale(scale)
        self.scaled, self.scale, self.attn_drop = scaled, scale, _checks.probability("attn_drop", attn_drop)

    forward = core_forward  # the classic modules' one forward (nn._signature)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               **core: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return attention(query, key, value, score="scaled_dot" if self.scaled else "dot", scale=self.scale, **core)

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}, scale={self.scale}, attn_drop={self.attn_drop}"


__all__ = ["DotProductAttention"]
