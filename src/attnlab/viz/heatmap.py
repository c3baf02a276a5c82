"""Attention pictures with matplotlib: heatmaps, head grids, alignments, mask patterns, spatial overlays.

Every function takes plain tensors or arrays and labels (no attnlab objects), so
weights from any module, trace or saved JSON can be drawn, and returns a
``matplotlib.figure.Figure``; ``save(fig, path)`` writes PNG or SVG (by suffix).

| function | input | shows |
|---|---|---|
| ``heatmap(w, x_labels, y_labels)`` | (q, k) weights | one query row per line, keys across |
| ``head_grid(w)`` | (h, q, k) or (layers, h, q, k) | a grid of heatmaps, one per head (and layer) |
| ``alignment(w, source, target)`` | (target, source) weights | a translation alignment: target words down, source across |
| ``pattern(mask)`` | (q, k) bool, True = may attend | a sparse pattern: filled where attended |
| ``spatial_overlay(image, attn)`` | (H, W[, 3]) image, (h, w) map | the map upsampled over the image |

Chinese labels get a CJK font (``attnlab.viz.fonts``), with a warning when none is installed.
matplotlib is an optional dependency: ``pip install attnlab[viz]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .fonts import use_cjk_font


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("attnlab.viz needs matplotlib: pip install 'attnlab[viz]'") from None
    return plt


def as_array(x: Any, name: str = "weights", dims: tuple[int, ...] = (2,)) -> np.ndarray:
    """A tensor, array or nested list as a float (or bool) NumPy array with one of ``dims`` dimensions."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype != bool:
        a = a.astype(np.float64)
    if a.ndim not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dimensions; got shape {a.shape}")
    return a


def _labels(name: str, labels, n: int) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels for {n} positions")
    return labels


def _draw(ax, w: np.ndarray, x_labels, y_labels, *, annotate: bool, cmap: str, vmax: float | None):
    im = ax.imshow(np.where(np.isfinite(w), w, np.nan), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    q, k = w.shape
    ax.set_xticks(range(k), x_labels if x_labels else [str(j + 1) for j in range(k)], rotation=45 if k > 8 else 0)
    ax.set_yticks(range(q), y_labels if y_labels else [str(i + 1) for i in range(q)])
    if annotate and q * k <= 400:
        top = np.nanmax(w) if np.isfinite(w).any() else 1.0
        for i in range(q):
            for j in range(k):
                if np.isfinite(w[i, j]):
                    ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if w[i, j] > 0.6 * top else "black")
    return im


def heatmap(weights, x_labels=None, y_labels=None, *, title: str = "", annotate: bool = True,
            cmap: str = "viridis", xlabel: str = "key", ylabel: str = "query"):
    """A (q, k) weight matrix as a heatmap with token labels (keys across, queries down)."""
    w = as_array(weights)
    x_labels, y_labels = _labels("x_labels", x_labels, w.shape[1]), _labels("y_labels", y_labels, w.shape[0])
    use_cjk_font((x_labels or []) + (y_labels or []) + [title])
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * w.shape[1], 1.0 + 0.5 * w.shape[0]), constrained_layout=True)
    im = _draw(ax, w, x_labels, y_labels, annotate=annotate, cmap=cmap, vmax=None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def head_grid(weights, x_labels=None, y_labels=None, *, title: str = "", annotate: bool = False,
              cmap: str = "viridis"):
    """(h, q, k) or (layers, h, q, k) weights: one heatmap per head, a row per layer, one colour scale."""
    w = as_array(weights, dims=(3, 4))
    if w.ndim == 3:
        w = w[None]
    n_layers, n_heads, q, k = w.shape
    x_labels, y_labels = _labels("x_labels", x_labels, k), _labels("y_labels", y_labels, q)
    use_cjk_font((x_labels or []) + (y_labels or []) + [title])
    plt = _plt()
    fig, axes = plt.subplots(n_layers, n_heads, squeeze=False, constrained_layout=True,
                             figsize=(0.4 * k * n_heads + 1.5, 0.4 * q * n_layers + 1.0))
    vmax = float(np.nanmax(np.where(np.isfinite(w), w, np.nan))) if np.isfinite(w).any() else 1.0
    im = None
    for li in range(n_layers):
        for hi in range(n_heads):
            ax = axes[li][hi]
            im = _draw(ax, w[li, hi], x_labels, y_labels, annotate=annotate, cmap=cmap, vmax=vmax)
            ax.set_title(f"layer {li + 1} head {hi + 1}" if n_layers > 1 else f"head {hi + 1}", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.colorbar(im, ax=axes, shrink=0.6)
    return fig


def alignment(weights, source, target, *, title: str = "", annotate: bool = False):
    """A translation alignment: weights (target length, source length), target words down, source across."""
    w = as_array(weights)
    fig = heatmap(w, source, target, title=title, annotate=annotate, cmap="Greys",
                  xlabel="source", ylabel="target")
    ax = fig.axes[0]
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    best = np.nanargmax(np.where(np.isfinite(w), w, -np.inf), axis=1)
    ax.scatter(best, range(w.shape[0]), marker="s", facecolors="none", edgecolors="red", s=120, linewidths=1.2)
    return fig


def pattern(mask, x_labels=None, y_labels=None, *, title: str = ""):
    """A (q, k) bool mask (True = may attend) as a picture: filled cells are attended."""
    m = as_array(mask, name="mask")
    if m.dtype != bool:
        m = m != 0
    x_labels, y_labels = _labels("x_labels", x_labels, m.shape[1]), _labels("y_labels", y_labels, m.shape[0])
    use_cjk_font((x_labels or []) + (y_labels or []) + [title])
    plt = _plt()
    side = min(8.0, 1.0 + 0.3 * max(m.shape))
    fig, ax = plt.subplots(figsize=(side, side * m.shape[0] / max(1, m.shape[1]) + 0.5), constrained_layout=True)
    ax.imshow(m, cmap="Blues", vmin=0, vmax=1.3, interpolation="nearest")
    q, k = m.shape
    if max(q, k) <= 40:
        ax.set_xticks(range(k), x_labels if x_labels else [str(j + 1) for j in range(k)])
        ax.set_yticks(range(q), y_labels if y_labels else [str(i + 1) for i in range(q)])
        ax.set_xticks(np.arange(-0.5, k), minor=True)
        ax.set_yticks(np.arange(-0.5, q), minor=True)
        ax.grid(which="minor", color="white", linewidth=0.8)
        ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title or f"{int(m.sum())} of {m.size} pairs attended ({m.mean():.0%})")
    return fig


def _upsample(a: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour upsampling of a (h, w) map to (H, W) (each cell covers its share of the image)."""
    rows = (np.arange(shape[0]) * a.shape[0] // shape[0]).clip(0, a.shape[0] - 1)
    cols = (np.arange(shape[1]) * a.shape[1] // shape[1]).clip(0, a.shape[1] - 1)
    return a[rows][:, cols]


def spatial_overlay(image, attention, *, title: str = "", alpha: float = 0.5, cmap: str = "jet"):
    """An attention map (h, w) upsampled over an image (H, W) or (H, W, 3) (or (3, H, W))."""
    img = as_array(image, name="image", dims=(2, 3))
    if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):
        img = np.moveaxis(img, 0, -1)
    att = as_array(attention, name="attention")
    big = _upsample(att, img.shape[:2])
    use_cjk_font([title])
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.5), constrained_layout=True)
    shown = (img - img.min()) / (np.ptp(img) or 1.0)
    axes[0].imshow(shown.squeeze(), cmap="gray" if shown.ndim == 2 or shown.shape[-1] == 1 else None)
    axes[0].set_title("image")
    axes[1].imshow(shown.squeeze(), cmap="gray" if shown.ndim == 2 or shown.shape[-1] == 1 else None)
    im = axes[1].imshow(big, cmap=cmap, alpha=alpha)
    axes[1].set_title("attention")
    for ax in axes:
        ax.axis("off")
    fig.colorbar(im, ax=axes[1], shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def save(fig, path: str | Path) -> Path:
    """Write a figure as PNG or SVG (by the path's suffix) and close it."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"save a figure as .png or .svg; got {path.name!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return path


__all__ = ["heatmap", "head_grid", "alignment", "pattern", "spatial_overlay", "save", "as_array"]
