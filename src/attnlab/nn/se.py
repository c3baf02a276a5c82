"""``SqueezeExcite``: squeeze-and-excitation as a module (Hu et al. 2018, https://arxiv.org/abs/1709.01507).

    s = σ(W_2 δ(W_1 AvgPool F)),  F' = F ⊗ s

| paper    | parameter |
|----------|-----------|
| W_1, W_2 | ``fc1``, ``fc2`` (``nn.Linear``) |

Owns the parameters and calls ``attnlab.functional.se``. ``forward(x)`` returns
``(gated map, None)``; ``forward(x, need_weights=True)`` returns ``(gated map, s (b, C, 1, 1))``.
"""

from __future__ import annotations

import torch

from ..functional.se import se
from .channel import _MLPGate
from .registry import register


@register("se", functional=se, supports=("weights",))
class SqueezeExcite(_MLPGate):
    """Squeeze-and-excitation: s = σ(W_2 δ(W_1 AvgPool F)), F' = F ⊗ s."""

    def __init__(self, channels: int, reduction: int = 16, *, hidden: int | None = None, bias: bool = True):
        super().__init__(channels, reduction, hidden, bias)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (b, C, H, W) → (F' (b, C, H, W), s (b, C, 1, 1) or None)."""
        self._check(x)
        out, s = se(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
        return out, (s if need_weights else None)


__all__ = ["SqueezeExcite"]
