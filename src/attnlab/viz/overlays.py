"""Attention maps drawn over images as PNG files (matplotlib, Agg backend).

The functions take NumPy arrays that the models already returned (nothing is
recomputed) and only draw; Chinese words get a CJK font through
``attnlab.viz.fonts.use_cjk_font`` (a warning names the package when none is installed).
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
    from .fonts import use_cjk_font

    use_cjk_font(list(column_titles or []) + list(row_titles or []))
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
    return _save(fig, path)


def _cells(ax, image: np.ndarray, cells: int | None) -> None:
    """Thin lines between the scene's cells."""
    if cells and cells > 1:
        side = np.asarray(image).shape[-1] if np.asarray(image).shape[0] in (1, 3) else np.asarray(image).shape[1]
        for k in range(1, cells):
            ax.axhline(k * side / cells - 0.5, color="grey", lw=0.6)
            ax.axvline(k * side / cells - 0.5, color="grey", lw=0.6)


def _save(fig, path: str | Path) -> Path:
    with warnings.catch_warnings():  # no CJK font: use_cjk_font has warned once; silence per-glyph warnings
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout()
        from .heatmap import save

        return save(fig, path)  # written whole, then renamed


def save_word_overlay(image: np.ndarray, amap: np.ndarray, word: str, path: str | Path, *,
                      cells: int | None = None) -> Path:
    """One generated word's attention over the image regions (scaled to the map's maximum)."""
    from .fonts import use_cjk_font

    use_cjk_font([word])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(2.4, 2.6))
    _overlay(ax, image, amap, vmax=float(np.max(amap)) or 1.0)
    _cells(ax, image, cells)
    ax.set_title(word, fontsize=10)
    return _save(fig, path)


def save_caption_strip(image: np.ndarray, maps: np.ndarray, words: list[str], path: str | Path, *,
                       cells: int | None = None, title: str = "") -> Path:
    """The image, then one panel per generated word with its map (L, g, g) over the image, on one row."""
    from .fonts import use_cjk_font

    use_cjk_font(list(words) + [title])
    plt = _plt()
    n = 1 + len(words)
    fig, axes = plt.subplots(1, n, figsize=(1.7 * n, 2.0), squeeze=False)
    _show(axes[0][0], image)
    _cells(axes[0][0], image, cells)
    axes[0][0].set_title(title or "image", fontsize=9)
    for ax, word, amap in zip(axes[0][1:], words, maps):
        _overlay(ax, image, amap, vmax=1.0)
        _cells(ax, image, cells)
        ax.set_title(f"{word} ({float(np.max(amap)):.2f})", fontsize=9)
    return _save(fig, path)


__all__ = ["save_overlay_grid", "save_word_overlay", "save_caption_strip"]
