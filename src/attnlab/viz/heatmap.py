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

Every picture is at most ``MAX_PX`` (4,000) pixels a side: a long sequence is drawn
block-averaged (each pixel the mean of a block of cells) and labelled every n-th
token, and a note under the picture says so. Masked (or non-finite) cells are
hatched grey, not drawn as zeros, with a legend entry; every heatmap has a colour
bar; titles are wrapped to the figure's width.

Chinese labels get a CJK font (``attnlab.viz.fonts``), with a warning when none is installed.
matplotlib is an optional dependency: ``pip install attnlab[viz]``.
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .._files import writing
from .fonts import use_cjk_font


def pyplot_or_none():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed (for code
    whose pictures are optional: the experiments write their tables either way)."""
    try:
        return _plt()
    except ImportError:
        return None


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


#: No picture is wider or taller than this many pixels (``save`` writes at ``DPI``).
MAX_PX = 4000
DPI = 120
#: At least this many tick labels fit an axis; a heatmap labels every token while its cells are a
#: label high (``CELL_PT``), longer sequences every n-th token.
MAX_TICKS = 48
SMALL_PT, CELL_PT = 7, 10  # the type of a label per token, and the points a cell needs for it


def _wrap(text: str, width_in: float) -> str:
    """Wrap a title to a figure ``width_in`` inches wide (about 9 characters an inch at 10 pt)."""
    return "\n".join(textwrap.wrap(text, max(12, int(width_in * 9)))) if text else text


def _pool(w: np.ndarray, max_cells: int) -> tuple[np.ndarray, int]:
    """Block-average a (q, k) matrix so neither side exceeds ``max_cells``; NaN cells are left out of the means."""
    f = max(1, -(-max(w.shape) // max(1, max_cells)))
    if f == 1:
        return w, 1
    q, k = -(-w.shape[0] // f) * f, -(-w.shape[1] // f) * f
    pad = np.full((q, k), np.nan)
    pad[: w.shape[0], : w.shape[1]] = w
    blocks = pad.reshape(q // f, f, k // f, f)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-masked block stays NaN (hatched)
        return np.nanmean(blocks, axis=(1, 3)), f


def _ticks(n: int, labels, f: int, max_ticks: int = MAX_TICKS) -> tuple[list[float], list[str], int]:
    """Tick positions (in pooled cells) and labels, every ``step``-th position when there are too many."""
    labels = labels if labels else [str(i + 1) for i in range(n)]
    step = max(1, -(-n // max_ticks))
    idx = list(range(0, n, step))
    return [(i + 0.5) / f - 0.5 for i in idx], [labels[i] for i in idx], step


def _draw(ax, w: np.ndarray, x_labels, y_labels, *, annotate: bool, cmap: str, vmax: float | None,
          masked=None, max_cells: int = MAX_PX, ticks: bool = True,
          max_ticks: int = MAX_TICKS) -> tuple[Any, list[str]]:
    """Draw (q, k) weights; masked/non-finite cells hatched. Returns the image and notes on what was reduced."""
    import matplotlib.patches as mpatches

    w = np.where(np.isfinite(w), w, np.nan)
    if masked is not None:
        w = np.where(np.asarray(masked, bool), np.nan, w)
    q, k = w.shape
    shown, f = _pool(w, max_cells)
    notes = [f"{q} × {k} drawn as {shown.shape[0]} × {shown.shape[1]} (each cell the mean of a {f} × {f} block)"] if f > 1 else []
    ax.add_patch(mpatches.Rectangle((-0.5, -0.5), shown.shape[1], shown.shape[0], facecolor="#eeeeee",
                                    edgecolor="#aaaaaa", hatch="///", linewidth=0, zorder=0))
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto",
                   interpolation="nearest", zorder=1)
    if ticks:
        xt, xl, xs = _ticks(k, x_labels, f, max_ticks)
        yt, yl, ys = _ticks(q, y_labels, f, max_ticks)
        if max(len(xl), len(yl)) > MAX_TICKS:  # a label for every token of a long input: small type
            ax.tick_params(labelsize=SMALL_PT)
        ax.set_xticks(xt, xl, rotation=45 if len(xl) > 8 else 0, ha="right" if len(xl) > 8 else "center")
        ax.set_yticks(yt, yl)
        if xs > 1 or ys > 1:
            notes.append(f"labels: one every {max(xs, ys)} tokens")
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    if annotate and q * k <= 400 and f == 1:
        top = np.nanmax(w) if np.isfinite(w).any() else 1.0
        for i in range(q):
            for j in range(k):
                if np.isfinite(w[i, j]):
                    ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7, zorder=2,
                            color="white" if w[i, j] > 0.6 * top else "black")
    return im, notes


def _masked_legend(ax, w: np.ndarray, masked) -> None:
    import matplotlib.patches as mpatches

    if (masked is not None and np.asarray(masked, bool).any()) or not np.isfinite(w).all():
        ax.legend(handles=[mpatches.Patch(facecolor="#eeeeee", edgecolor="#aaaaaa", hatch="///", label="masked")],
                  loc="upper left", bbox_to_anchor=(1.0, -0.02), fontsize=8, frameon=False)


def _side(n: int) -> float:
    """Inches for n cells: roomy for short sequences (half an inch a cell), a label's height a cell for
    long ones, and capped so the picture stays under MAX_PX."""
    return min(0.5 * n, max(12.0, n * CELL_PT / 72), 0.8 * MAX_PX / DPI - 3)


def _max_ticks(n: int, side_in: float) -> int:
    """Tick labels for n tokens along ``side_in`` inches: every token's while each cell is a label high,
    else at most MAX_TICKS."""
    return max(MAX_TICKS, n if n * CELL_PT <= side_in * 72 else 0)


def heatmap(weights, x_labels=None, y_labels=None, *, title: str = "", annotate: bool = True,
            cmap: str = "viridis", xlabel: str = "key", ylabel: str = "query", masked=None):
    """A (q, k) weight matrix as a heatmap with token labels (keys across, queries down).

    ``masked`` (q, k) bool, True = masked: those cells are hatched (as are non-finite weights)."""
    w = as_array(weights)
    x_labels, y_labels = _labels("x_labels", x_labels, w.shape[1]), _labels("y_labels", y_labels, w.shape[0])
    use_cjk_font((x_labels or []) + (y_labels or []) + [title])
    plt = _plt()
    width = 2.2 + _side(w.shape[1])
    fig, ax = plt.subplots(figsize=(max(4.0, width), max(2.5, 1.6 + _side(w.shape[0]))), constrained_layout=True)
    im, notes = _draw(ax, w, x_labels, y_labels, annotate=annotate, cmap=cmap, vmax=None, masked=masked,
                      max_cells=int(_side(max(w.shape)) * DPI), max_ticks=_max_ticks(max(w.shape), _side(max(w.shape))))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(_wrap(title, max(4.0, width) - 1.5))
    fig.colorbar(im, ax=ax, shrink=0.8, label="weight")
    _masked_legend(ax, w, masked)
    if notes:
        fig.text(0.01, 0.002, "; ".join(notes), fontsize=7, color="#555555", ha="left", va="bottom")
    return fig


def head_grid(weights, x_labels=None, y_labels=None, *, title: str = "", annotate: bool = False,
              cmap: str = "viridis", masked=None, xlabel: str = "key", ylabel: str = "query"):
    """(h, q, k) or (layers, h, q, k) weights: one heatmap per head, a row per layer, one colour scale.

    Many heads or long sequences shrink each panel so the picture stays ≤ ``MAX_PX`` a side;
    panels smaller than about 1.2 inches drop their tick labels (a note says so)."""
    w = as_array(weights, dims=(3, 4))
    if w.ndim == 3:
        w = w[None]
    n_layers, n_heads, q, k = w.shape
    m = None
    if masked is not None:
        m = np.broadcast_to(as_array(masked, name="masked", dims=(2, 3, 4)).astype(bool), w.shape)
    x_labels, y_labels = _labels("x_labels", x_labels, k), _labels("y_labels", y_labels, q)
    use_cjk_font((x_labels or []) + (y_labels or []) + [title])
    plt = _plt()
    budget = 0.9 * MAX_PX / DPI - 2.0  # inches for the panels
    pw = min(0.4 * k + 0.8, budget / n_heads)
    ph = min(0.4 * q + 0.8, budget / n_layers)
    fig, axes = plt.subplots(n_layers, n_heads, squeeze=False, constrained_layout=True,
                             figsize=(pw * n_heads + 1.5, ph * n_layers + 1.2))
    vmax = float(np.nanmax(np.where(np.isfinite(w), w, np.nan))) if np.isfinite(w).any() else 1.0
    im, notes = None, []
    ticks = min(pw, ph) >= 1.2 and max(q, k) <= 4 * MAX_TICKS
    for li in range(n_layers):
        for hi in range(n_heads):
            ax = axes[li][hi]
            im, notes = _draw(ax, w[li, hi], x_labels, y_labels, annotate=annotate, cmap=cmap, vmax=vmax,
                              masked=None if m is None else m[li, hi], max_cells=int(min(pw, ph) * DPI),
                              ticks=ticks)
            ax.set_title(f"layer {li + 1} head {hi + 1}" if n_layers > 1 else f"head {hi + 1}",
                         fontsize=9 if pw >= 1.2 else 6)
            if li == n_layers - 1 and ticks:
                ax.set_xlabel(xlabel, fontsize=8)
            if hi == 0 and ticks:
                ax.set_ylabel(ylabel, fontsize=8)
    if not ticks:
        notes.append(f"{n_layers * n_heads} panels of {q} × {k}: tick labels left out")
    if title:
        fig.suptitle(_wrap(title, pw * n_heads + 1.5))
    fig.colorbar(im, ax=axes, shrink=0.6, label="weight")
    if notes:
        fig.text(0.01, 0.002, "; ".join(notes), fontsize=7, color="#555555", ha="left", va="bottom")
    return fig


def alignment(weights, source, target, *, title: str = "", annotate: bool = False):
    """A translation alignment: weights (target length, source length), target words down, source across."""
    w = as_array(weights)
    fig = heatmap(w, source, target, title=title, annotate=annotate, cmap="Greys",
                  xlabel="source", ylabel="target")
    ax = fig.axes[0]
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    if max(w.shape) <= MAX_TICKS:  # the largest weight of each target word, outlined
        best = np.nanargmax(np.where(np.isfinite(w), w, -np.inf), axis=1)
        ax.scatter(best, range(w.shape[0]), marker="s", facecolors="none", edgecolors="red", s=120,
                   linewidths=1.2, label="largest weight of each target word", zorder=3)
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.02), fontsize=8, frameon=False)
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
    ax.set_title(_wrap(title or f"{int(m.sum())} of {m.size} pairs attended ({m.mean():.0%})", side))
    import matplotlib.patches as mpatches

    cm = plt.get_cmap("Blues")
    ax.legend(handles=[mpatches.Patch(color=cm(1 / 1.3), label="attended"),
                       mpatches.Patch(facecolor=cm(0.0), edgecolor="#999999", label="not attended")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
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
    w_in, h_in = fig.get_size_inches()
    if max(w_in, h_in) * DPI > MAX_PX:  # a last guard: scale the whole figure down to the cap
        scale = MAX_PX / (max(w_in, h_in) * DPI)
        fig.set_size_inches(w_in * scale, h_in * scale)
    with writing(path) as tmp:  # written whole: a temporary file, then renamed
        fig.savefig(tmp, dpi=DPI)
    _plt().close(fig)
    return path


__all__ = ["pyplot_or_none", "heatmap", "head_grid", "alignment", "pattern", "spatial_overlay", "save", "as_array"]
