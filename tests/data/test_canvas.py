"""Cluttered canvases and the box-mass measure, checked by hand."""

from __future__ import annotations

import re

import numpy as np
import pytest

from attnlab.data.canvas import box_share, cluttered, mass_in_box


def _items():
    items = np.zeros((3, 28, 28), dtype=np.uint8)
    items[0, 10:14, 12:15] = 200  # a 4 × 3 blob
    items[1, :, :] = 7
    items[2, 0, 0] = 9
    return items, np.array([5, 6, 7])


def test_the_item_is_pasted_whole_and_its_box_is_its_ink():
    items, labels = _items()
    canv, y, boxes = cluttered(items, labels, n=40, size=40, clutter=0, seed=1)
    for c, lab, (y0, x0, y1, x1) in zip(canv, y, boxes):
        j = int(lab) - 5
        if j == 0:
            assert (y1 - y0, x1 - x0) == (4, 3)
            assert (c[y0:y1, x0:x1] == 200).all() and c.sum() == 200 * 12  # nothing else without clutter
        assert 0 <= y0 < y1 <= 40 and 0 <= x0 < x1 <= 40


def test_clutter_comes_from_other_items_and_never_erases_the_item():
    items, labels = _items()
    canv, y, boxes = cluttered(items, labels, n=60, size=48, clutter=6, fragment=9, seed=0)
    for c, lab, (y0, x0, y1, x1) in zip(canv, y, boxes):
        if lab == 5:
            assert (c[y0:y1, x0:x1] >= 200).all()  # maximum: the blob survives every fragment
            assert set(np.unique(c)) <= {0, 7, 9, 200}  # fragments of item 1 (7) and item 2 (9) only


def test_mass_in_box_by_hand():
    maps = np.zeros((2, 4, 4))
    maps[0, 0, 0], maps[0, 3, 3] = 3.0, 1.0  # 3 of 4 inside the top-left quarter
    maps[1] = 1.0
    boxes = np.array([[0, 0, 4, 4], [0, 0, 4, 4]])  # the top-left quarter of an 8 × 8 canvas
    np.testing.assert_allclose(mass_in_box(maps, boxes, canvas=8), [0.75, 0.25])
    np.testing.assert_allclose(box_share(boxes, 8, 4), [0.25, 0.25])
    # a box that covers part of a cell widens to the cells it touches: rows 0..2 of 8 → cells 0..1 of 4
    np.testing.assert_allclose(mass_in_box(np.ones((1, 4, 4)), np.array([[0, 0, 3, 3]]), canvas=8), [4 / 16])


def test_bad_input():
    with pytest.raises(ValueError, match="size must be >= 28"):
        cluttered(*_items(), n=1, size=20)
    with pytest.raises(ValueError, match=r"images must be \(N ≥ 2, 28, 28\)"):
        cluttered(np.zeros((1, 28, 28), np.uint8), np.zeros(1), n=1)


def test_fragment_sizes_1_to_28_and_a_whole_item_as_clutter():
    """fragment = 28 cuts the whole 28 × 28 of another item: here item 1, all 7s, so every canvas of item 0
    holds a full 28 × 28 square of ink ≥ 7; fragment = 1 adds single pixels; 0 and 29 are refused."""
    items = np.zeros((2, 28, 28), dtype=np.uint8)
    items[0, 10:14, 12:15] = 200
    items[1] = 7
    canv, y, _ = cluttered(items, np.array([0, 1]), n=6, size=40, clutter=1, fragment=28, seed=2)
    assert (y == 0).sum() >= 2
    for c, lab in zip(canv, y):
        if lab == 0:
            ink = (c >= 7).astype(int)
            windows = np.lib.stride_tricks.sliding_window_view(ink, (28, 28)).sum((-1, -2))
            assert windows.max() == 28 * 28
            assert 28 * 28 - 12 <= (c == 7).sum() <= 28 * 28  # the item's 12 blob pixels may cover some (maximum)
    canv, y, _ = cluttered(items, np.array([0, 1]), n=6, size=40, clutter=3, fragment=1, seed=2)
    for c, lab in zip(canv, y):
        if lab == 0:
            assert (c == 7).sum() <= 3 and set(np.unique(c)) <= {0, 7, 200}
    for bad in (0, 29):
        with pytest.raises(ValueError, match=f"fragment must be in 1..28; got {bad}"):
            cluttered(items, np.array([0, 1]), n=1, size=40, fragment=bad)


def test_images_not_n_by_28_by_28_are_refused_with_their_shape():
    for bad in (np.zeros((3, 28, 27), np.uint8), np.zeros((3, 27, 28), np.uint8), np.zeros((3, 784), np.uint8)):
        with pytest.raises(ValueError, match=re.escape(f"images must be (N ≥ 2, 28, 28); got {bad.shape}") + "$"):
            cluttered(bad, np.zeros(3), n=1)


def test_clutter_is_drawn_from_every_other_item_and_never_from_the_placed_one():
    """Three items filled whole with 10, 20, 30: outside the placed item's own 28 × 28 square, a canvas
    shows only fragments of the two other items, and over 60 canvases each other item shows up."""
    items = np.stack([np.full((28, 28), 10 * (k + 1), np.uint8) for k in range(3)])
    canv, y, boxes = cluttered(items, np.arange(3), n=60, size=48, clutter=6, fragment=9, seed=0)
    seen = {k: set() for k in range(3)}
    for c, lab, (y0, x0, y1, x1) in zip(canv, y, boxes):
        assert (y1 - y0, x1 - x0) == (28, 28) and (c[y0:y1, x0:x1] >= 10 * (lab + 1)).all()
        outside = np.ones(c.shape, bool)
        outside[y0:y1, x0:x1] = False
        values = set(np.unique(c[outside]).tolist()) - {0}
        assert values <= {10 * (k + 1) for k in range(3) if k != lab}, (lab, values)
        seen[int(lab)] |= values
    for k in range(3):
        assert seen[k] == {10 * (m + 1) for m in range(3) if m != k}
