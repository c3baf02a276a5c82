"""Attention maps drawn over images as PNG files (matplotlib, Agg backend).

A stop-gap until ``attnlab.viz`` has overlays: the functions take NumPy arrays
that the models already returned (nothing is recomputed) and only draw.
``map`` arrays of any size are stretched over the image (nearest-neighbour
blocks for region grids, so a 4×4 grid shows 16 squares). Needs matplotlib
(``pip install 'attnlab[viz]'``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("drawing overlays needs matplotlib: pip install 'attnlab[viz]'") from None
    return plt


def _show(ax, image: np.ndarray) -> tuple[int, int]:
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3):  # (C, H, W) → (H, W, C)
        img = img.transpose(1, 2, 0)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    ax.imshow(img, cmap="gray" if img.ndim == 2 else None, interpolation="nearest")
    ax.set_xticks([]), ax.set_yticks([])
    return img.shape[0], img.shape[1]


def _overlay(ax, image: np.ndarray, amap: np.ndarray, vmax: float | None) -> None:
    h, w = _show(ax, image)
    ax.imshow(np.asarray(amap, dtype=np.float64), cmap="jet", alpha=0.45, extent=(-0.5, w - 0.5, h - 0.5, -0.5),
              interpolation="nearest", vmin=0.0, vmax=vmax)


def save_overlay_grid(
    images: list[np.ndarray],
    maps: list[list[np.ndarray]],
    path: str | Path,
    *,
    column_titles: list[str] | None = None,
    row_titles: list[str] | None = None,
) -> Path:
    """One row per image: the image, then each of its maps over it. Returns the PNG path."""
    plt = _plt()
    rows, cols = len(images), 1 + max(len(m) for m in maps)
    fig, axes = plt.subplots(rows, cols, figsize=(1.6 * cols, 1.6 * rows), squeeze=False)
    for r, (img, row_maps) in enumerate(zip(images, maps)):
        _show(axes[r][0], img)
        if row_titles:
            axes[r][0].set_ylabel(row_titles[r], fontsize=7)
        for c, amap in enumerate(row_maps, start=1):
            _overlay(axes[r][c], img, amap, vmax=1.0)
        for c in range(len(row_maps) + 1, cols):
            axes[r][c].axis("off")
    if column_titles:
        for c, t in enumerate(column_titles[:cols]):
            axes[0][c].set_title(t, fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def save_word_overlay(image: np.ndarray, amap: np.ndarray, word: str, path: str | Path) -> Path:
    """One generated word's attention over the image regions (scaled to the map's maximum)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(2.4, 2.6))
    _overlay(ax, image, amap, vmax=float(np.max(amap)) or 1.0)
    ax.set_title(word, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # a word without a glyph in the default font (e.g. CJK) draws as boxes
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["save_overlay_grid", "save_word_overlay"]
