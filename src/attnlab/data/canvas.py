"""Cluttered canvases: a small image placed at a random position among fragments of others.

A task where *where to look* matters (the idea of cluttered MNIST, Mnih et al. 2014,
"Recurrent Models of Visual Attention", https://arxiv.org/abs/1406.6247): each 28 × 28
item (a digit or a Fashion-MNIST piece) is pasted at a random position of a larger
``size`` × ``size`` canvas, and ``clutter`` square fragments cut from *other* items of
the same split are pasted at random positions around it. The label is the item's class;
the item's bounding box (its non-zero pixels) is returned, so a spatial attention map can
be scored by the share of its mass inside the box.

Everything is generated from the shipped sets and a seed; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np


def cluttered(
    images: np.ndarray,
    labels: np.ndarray,
    *,
    n: int,
    size: int = 48,
    clutter: int = 8,
    fragment: int = 9,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(canvases uint8 (n, size, size), labels (n,), boxes (n, 4) as y0, x0, y1, x1 exclusive).

    images: uint8 (N, 28, 28) with 0 = background; each canvas draws one of them (with
    replacement) and ``clutter`` fragments of ``fragment`` × ``fragment`` pixels from others.
    Pixels combine by their maximum, so the item is never erased by clutter."""
    if images.ndim != 3 or images.shape[1:] != (28, 28) or len(images) < 2:
        raise ValueError(f"images must be (N ≥ 2, 28, 28); got {images.shape}")
    if size < 28:
        raise ValueError(f"size must be >= 28 (an item is 28 × 28); got {size}")
    if not 1 <= fragment <= 28:
        raise ValueError(f"fragment must be in 1..28; got {fragment}")
    rng = np.random.default_rng(seed)
    out = np.zeros((n, size, size), dtype=np.uint8)
    boxes = np.zeros((n, 4), dtype=np.int64)
    pick = rng.integers(len(images), size=n)
    for i, j in enumerate(pick):
        for _ in range(clutter):
            other = int(rng.integers(len(images) - 1))
            other += other >= j  # any item but the one placed
            fy, fx = rng.integers(0, 28 - fragment + 1, size=2)
            piece = images[other, fy : fy + fragment, fx : fx + fragment]
            y, x = rng.integers(0, size - fragment + 1, size=2)
            np.maximum(out[i, y : y + fragment, x : x + fragment], piece, out=out[i, y : y + fragment, x : x + fragment])
        y, x = rng.integers(0, size - 28 + 1, size=2)
        np.maximum(out[i, y : y + 28, x : x + 28], images[j], out=out[i, y : y + 28, x : x + 28])
        rows, cols = np.nonzero(images[j])
        if len(rows):
            boxes[i] = (y + rows.min(), x + cols.min(), y + rows.max() + 1, x + cols.max() + 1)
        else:
            boxes[i] = (y, x, y + 28, x + 28)
    return out, labels[pick], boxes


def mass_in_box(maps: np.ndarray, boxes: np.ndarray, canvas: int) -> np.ndarray:
    """The share of each map's total mass that lies inside its box → (n,).

    maps (n, H, W) ≥ 0, at the canvas's resolution or a coarser one (H = canvas / s): the box
    (n, 4: y0, x0, y1, x1 on the ``canvas`` × ``canvas`` grid) is scaled to the map's grid and
    widened to the cells it touches. A map of zero mass scores 0."""
    n, h, w = maps.shape
    out = np.zeros(n)
    for i in range(n):
        y0, x0, y1, x1 = boxes[i]
        total = float(maps[i].sum())
        inside = maps[i, y0 * h // canvas : -(-y1 * h // canvas), x0 * w // canvas : -(-x1 * w // canvas)]
        out[i] = float(inside.sum()) / total if total > 0 else 0.0
    return out


def box_share(boxes: np.ndarray, canvas: int, h: int) -> np.ndarray:
    """The share of a uniform map's mass inside each box on an h × h grid (the chance level) → (n,)."""
    return mass_in_box(np.ones((len(boxes), h, h)), boxes, canvas)


__all__ = ["cluttered", "mass_in_box", "box_share"]
