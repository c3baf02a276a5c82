"""``ECA``: efficient channel attention as a module (Wang et al. 2020, https://arxiv.org/abs/1910.03151).

    w = σ(conv1d_k(AvgPool F)),  F' = F ⊗ w,   k = ψ(C) = |(log₂ C + 1) / 2|_odd when ``kernel_size=None``

| paper | parameter |
|-------|-----------|
| C1D_k | ``conv`` (``nn.Conv1d(1, 1, k, bias=False)``) |

Owns the parameter and calls ``attnlab.functional.eca``. ``forward(x)`` returns ``(gated map, None)``;
``forward(x, need_weights=True)`` returns ``(gated map, w (b, C, 1, 1))``.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from ..functional.eca import eca, eca_kernel_size
from .registry import register


@register("eca", functional=eca, supports=("weights",))
class ECA(nn.Module):
    """Efficient channel attention: w = σ(conv1d_k(AvgPool F)), F' = F ⊗ w.

    ``kernel_size=None`` picks the paper's adaptive k = ψ(C) (``eca_kernel_size``);
    an explicit kernel size must be odd.
    """

    def __init__(self, channels: int, kernel_size: int | None = None, *, gamma: int = 2, beta: int = 1):
        super().__init__()
        k = eca_kernel_size(channels, gamma, beta) if kernel_size is None else kernel_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0:
            raise ValueError(f"kernel_size must be a positive odd int or None (adaptive); got {kernel_size!r}")
        self.channels, self.kernel_size = channels, k
        self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, C, H, W) → (F' (b, C, H, W), w (b, C, 1, 1) or None)."""
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            _checks.module_input(self, ("x",), (x,))
        out, w = eca(x, self.conv.weight)
        return out, (w if need_weights else None)

    def extra_repr(self) -> str:
        return f"channels={self.channels}, kernel_size={self.kernel_size}"


__all__ = ["ECA"]
