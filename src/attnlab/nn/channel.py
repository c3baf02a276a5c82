"""Attention on feature maps as drop-in modules: channel, spatial, CBAM, SE, ECA.

* ``ChannelAttention`` / ``SpatialAttention`` / ``CBAM``: Woo et al. 2018,
  https://arxiv.org/abs/1807.06521. M_c = σ(MLP(AvgPool F) + MLP(MaxPool F)),
  M_s = σ(f^{k×k}([mean_c F; max_c F])), CBAM: F' = F ⊗ M_c, F'' = F' ⊗ M_s.
* ``SqueezeExcite``: Hu et al. 2018, https://arxiv.org/abs/1709.01507.
  s = σ(W_2 δ(W_1 AvgPool F)), F' = F ⊗ s.
* ``ECA``: Wang et al. 2020, https://arxiv.org/abs/1910.03151.
  w = σ(conv1d_k(AvgPool F)), k = ψ(C) = |(log₂ C + 1) / 2|_odd when ``kernel_size=None``.

Each module owns its parameters and calls the pure functions of
``attnlab.functional`` (also in ``attnlab.functional``). Input and output are
(b, C, H, W); any H, W (odd ones included) work, since the spatial convolution
is padded to keep the size.

Every module returns one type, as the attention modules do: ``forward(x)`` →
``(gated map, None)``; ``forward(x, need_weights=True)`` → ``(gated map, maps)``:
M_c (b, C, 1, 1) for the channel gates, M_s (b, 1, H, W) for the spatial one,
and ``CBAMMaps(channel, spatial)`` for CBAM. Every map is in [0, 1] (a sigmoid).
In an ``nn.Sequential``, take the map with ``out, _ = gate(x)`` in the caller.

| paper | parameter |
|-------|-----------|
| W_0, b_0 / W_1, b_1 (CBAM, C/r × C and C × C/r) | ``fc1``, ``fc2`` (``nn.Linear``) |
| f^{k×k} (CBAM)   | ``conv`` (``nn.Conv2d(2, 1, k)``) |
| W_1, W_2 (SE)    | ``fc1``, ``fc2`` |
| C1D_k (ECA)      | ``conv`` (``nn.Conv1d(1, 1, k, bias=False)``) |

Rules and caveats:

* The hidden width is ``attnlab.functional.reduced_channels(C, r) = max(1, C // r)``
  unless ``hidden`` is given: fewer channels than the ratio keep one hidden unit.
* The original CBAM code puts a batch norm after the spatial convolution;
  here it is a plain convolution with a bias (timm's ``CbamModule`` uses a norm
  too). The MLPs are ``nn.Linear`` on the pooled vectors, equivalent to the 1×1
  convolutions of other implementations.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .. import _checks
from ..functional.channel import channel_attention, reduced_channels, spatial_attention
from .registry import register


class CBAMMaps(NamedTuple):
    """CBAM's two attention maps: channel (b, C, 1, 1) and spatial (b, 1, H, W)."""

    channel: torch.Tensor
    spatial: torch.Tensor


def _hidden(channels: int, reduction: int, hidden: int | None) -> int:
    if hidden is None:
        return reduced_channels(channels, reduction)
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"hidden must be a positive int or None; got {hidden!r}")
    return hidden


class _MLPGate(nn.Module):
    """Shared parameters of the channel gates with an MLP: fc1 (C → C/r), fc2 (C/r → C)."""

    def __init__(self, channels: int, reduction: int, hidden: int | None, bias: bool):
        super().__init__()
        self.channels, self.reduction = channels, reduction
        self.hidden = _hidden(channels, reduction, hidden)
        self.fc1 = nn.Linear(channels, self.hidden, bias=bias)
        self.fc2 = nn.Linear(self.hidden, channels, bias=bias)

    def _check(self, x: torch.Tensor) -> None:
        if isinstance(x, torch.Tensor) and x.dim() == 4 and x.shape[1] != self.channels:
            raise ValueError(
                f"{type(self).__name__} was built for {self.channels} channels; got a map of shape "
                f"({', '.join(map(str, x.shape))}) with C={x.shape[1]}"
            )
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            _checks.module_input(self, ("x",), (x,))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, reduction={self.reduction}, hidden={self.hidden}"


@register("channel", functional=channel_attention, supports=("weights",))
class ChannelAttention(_MLPGate):
    """CBAM's channel attention: M_c = σ(MLP(AvgPool F) + MLP(MaxPool F)), F' = F ⊗ M_c."""

    def __init__(self, channels: int, reduction: int = 16, *, hidden: int | None = None, bias: bool = True):
        super().__init__(channels, reduction, hidden, bias)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, C, H, W) → (F' (b, C, H, W), M_c (b, C, 1, 1) or None)."""
        self._check(x)
        out, m_c = channel_attention(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
        return out, (m_c if need_weights else None)


@register("spatial", functional=spatial_attention, supports=("weights",))
class SpatialAttention(nn.Module):
    """CBAM's spatial attention: M_s = σ(f^{k×k}([mean_c F; max_c F])), F' = F ⊗ M_s; k odd."""

    def __init__(self, kernel_size: int = 7, *, bias: bool = True):
        super().__init__()
        if isinstance(kernel_size, bool) or not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd int (the map keeps its size); got {kernel_size!r}")
        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=bias)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, C, H, W) → (F' (b, C, H, W), M_s (b, 1, H, W) or None)."""
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            _checks.module_input(self, ("x",), (x,))
        out, m_s = spatial_attention(x, self.conv.weight, self.conv.bias)
        return out, (m_s if need_weights else None)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}"


@register("cbam", supports=("weights",))
class CBAM(nn.Module):
    """Convolutional Block Attention Module: F' = F ⊗ M_c(F), F'' = F' ⊗ M_s(F')."""

    def __init__(
        self,
        channels: int,
        reduction: int = 16,
        kernel_size: int = 7,
        *,
        hidden: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        self.channel = ChannelAttention(channels, reduction, hidden=hidden, bias=bias)
        self.spatial = SpatialAttention(kernel_size, bias=bias)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, CBAMMaps | None]:
        """x (b, C, H, W) → (F'' (b, C, H, W), CBAMMaps(M_c, M_s) or None)."""
        f1, m_c = self.channel(x, need_weights=True)
        f2, m_s = self.spatial(f1, need_weights=True)
        return f2, (CBAMMaps(m_c, m_s) if need_weights else None)


__all__ = ["ChannelAttention", "SpatialAttention", "CBAM", "CBAMMaps"]
