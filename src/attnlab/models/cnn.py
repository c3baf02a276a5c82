"""A small CNN for 28×28 images with an optional attention gate after each block.

    block_i:  conv3×3 → batch norm → ReLU → gate → max-pool 2×2
    head:     global average pool → linear → class logits

The gate is ``"none"`` or any registered mechanism built with ``channels`` (``gates()``: squeeze-and-excite,
ECA, CBAM and CBAM's channel attention; ``attnlab.nn.se``, ``eca``, ``channel``), made by
``attnlab.create(attention, channels=C, ...)`` with the config's ``reduction`` and ``kernel_size`` where
its constructor takes them. The same network plain and with each gate is what ``attnlab experiment vision``
compares. Shapes: images (b, C_in, H, W) → logits (b, num_classes). With
``need_weights=True`` the forward pass also returns one entry per block: the
gate's maps (``None`` for ``"none"``; M (b, C, 1, 1) for SE/ECA;
``CBAMMaps(channel, spatial)`` for CBAM, spatial (b, 1, H_i, W_i)).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from ..nn.registry import RECORDS, record


@dataclass
class CNNConfig:
    in_channels: int = 1
    num_classes: int = 10
    widths: tuple[int, ...] = (16, 32)  # channels of each block
    attention: str = "none"  # "none" or one of gates()
    reduction: int = 4  # the MLP ratio r of the gates with an MLP (hidden = max(1, C // r))
    kernel_size: int | None = None  # the gate's kernel (CBAM's spatial k × k, ECA's 1-D k); None: the gate's own


def _takes_channels(module: type[nn.Module]) -> bool:
    return "channels" in inspect.signature(module).parameters


def gates() -> tuple[str, ...]:
    """The names ``CNNConfig.attention`` takes: ``"none"`` and every registered mechanism built with ``channels``."""
    return ("none", *(name for name, rec in sorted(RECORDS.items()) if _takes_channels(rec.module)))


def make_gate(cfg: CNNConfig, channels: int) -> nn.Module | None:
    """The gate ``cfg.attention`` for a block of ``channels``, given the config's options that its constructor takes."""
    if cfg.attention == "none":
        return None
    rec = record(cfg.attention)
    options = {"channels": channels, "reduction": cfg.reduction, "kernel_size": cfg.kernel_size}
    takes = inspect.signature(rec.module).parameters
    return rec.build(**{k: v for k, v in options.items() if k in takes and v is not None})


class Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, gate: nn.Module | None):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.gate = gate
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor):
        x = torch.relu(self.bn(self.conv(x)))  # (b, C, H, W)
        maps = None
        if self.gate is not None:
            x, maps = self.gate(x, need_weights=True)
        return self.pool(x), maps


class SmallCNN(nn.Module):
    """conv blocks with an attention gate each, then average pool and a linear classifier."""

    def __init__(self, config: CNNConfig | None = None, **kwargs):
        super().__init__()
        cfg = config or CNNConfig(**kwargs)
        if cfg.attention not in gates():
            raise ValueError(f"attention must be one of {', '.join(gates())}; got {cfg.attention!r}")
        if not cfg.widths:
            raise ValueError("widths must name at least one block")
        self.config = cfg
        chans = (cfg.in_channels, *cfg.widths)
        self.blocks = nn.ModuleList(Block(a, b, make_gate(cfg, b)) for a, b in zip(chans[:-1], chans[1:]))
        self.head = nn.Linear(cfg.widths[-1], cfg.num_classes)

    def forward(self, x: torch.Tensor, *, need_weights: bool = False):
        if x.dim() != 4 or x.shape[1] != self.config.in_channels:
            raise ValueError(
                f"SmallCNN expects images (b, {self.config.in_channels}, H, W); got shape {tuple(x.shape)}"
            )
        all_maps = []
        for block in self.blocks:
            x, maps = block(x)
            all_maps.append(maps)
        logits = self.head(x.mean(dim=(2, 3)))  # (b, num_classes)
        return (logits, all_maps) if need_weights else logits


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["SmallCNN", "CNNConfig", "gates", "make_gate", "count_parameters"]
