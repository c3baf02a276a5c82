"""Efficient channel attention (ECA) as a pure function.

Wang et al. 2020, "ECA-Net: Efficient Channel Attention", https://arxiv.org/abs/1910.03151.

    w = σ(conv1d_k(AvgPool(F))),  F' = F ⊗ w       (k neighbouring channels, no MLP)

| paper | argument |
|-------|----------|
| the 1-D kernel C1D_k | ``weight`` (1, 1, k), no bias (as in the paper's code) |

The adaptive kernel is ``eca_kernel_size(C) = |(log₂ C + 1) / 2|_odd`` (the paper's
γ = 2, b = 1; an even value is rounded up to the next odd one).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import _checks
from ..trace import record
from .channel import _feature_map, mean_pool


def eca_kernel_size(channels: int, gamma: int = 2, beta: int = 1) -> int:
    """ECA's adaptive kernel size ψ(C) = |(log₂ C + b) / γ|_odd (Wang et al. 2020, eq. 12)."""
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive int; got {channels!r}")
    _checks.number("gamma", gamma, 0.0, meaning="ψ(C) = |(log₂ C + beta) / gamma|_odd")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise ValueError(f"beta must be a finite number (ψ(C) = |(log₂ C + beta) / gamma|_odd); got {beta!r}")
    t = int(abs((math.log2(channels) + beta) / gamma))
    return t if t % 2 else t + 1


def eca(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Efficient channel attention. x (b, C, H, W), weight (1, 1, k), k odd → (F', w (b, C, 1, 1)).

    The 1-D convolution runs across channels with zero padding k // 2, so
    channel c sees channels c - k//2 … c + k//2.
    """
    _feature_map(x, weight=weight)
    if weight.dim() != 3 or weight.shape[:2] != (1, 1) or weight.shape[2] % 2 == 0:
        raise ValueError(f"weight must be (1, 1, k) with k odd; got {_checks.shape(weight)}")
    z = mean_pool(x)  # (b, C); zeros for an empty image
    record("avg_pool", "z = AvgPool(F)", z, latex=r"z = \mathrm{AvgPool}(F)")
    logits = F.conv1d(z[:, None, :], weight, padding=weight.shape[-1] // 2)[:, 0]  # (b, C)
    record("conv", f"conv1d_{weight.shape[-1]}(z)", logits, latex=r"\mathrm{C1D}_k(z)")
    w = torch.sigmoid(logits)[:, :, None, None]  # (b, C, 1, 1)
    record("weights", "w = σ(conv1d_k(z))", w, latex=r"\omega = \sigma(\mathrm{C1D}_k(z))")
    out = x * w
    record("output", "F' = F ⊗ w", out, latex=r"F' = F \otimes \omega")
    return out, w


__all__ = ["eca", "eca_kernel_size"]
