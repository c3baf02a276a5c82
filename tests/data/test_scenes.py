"""How a scene is drawn (``scenes._draw``), on plain synthetic sprites: each sprite lands whole inside its
own cell, centred without jitter, and jitter never pushes it out of the cell."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.data.scenes import SceneConfig, _draw, make_scenes


def _sprite(p: int, value: float) -> np.ndarray:
    return np.full((3, p, p), value, dtype=np.float32)


def test_without_jitter_a_sprite_sits_centred_in_its_cell():
    cfg = SceneConfig(canvas=12, cells=2, jitter=0)  # cells of 6 px
    img = _draw(cfg, ((1, 0), (2, 1)), [_sprite(4, 0.0), _sprite(2, 0.5)], np.random.default_rng(0))
    want = np.ones((3, 12, 12), dtype=np.float32)
    want[:, 1:5, 7:11] = 0.0  # cell 1 (top right): rows 0..5, columns 6..11; offset (6 - 4) // 2 = 1
    want[:, 8:10, 2:4] = 0.5  # cell 2 (bottom left): rows 6..11, columns 0..5; offset (6 - 2) // 2 = 2
    np.testing.assert_array_equal(img, want)


def test_jitter_never_moves_a_sprite_out_of_its_cell():
    """Cells of 6 px, sprites of 5 or 6 px, jitter up to 4 px: the clip to the cell decides every position.
    A 6 px sprite fills its cell exactly whatever the jitter; a 5 px one stays inside and moves."""
    cfg = SceneConfig(canvas=12, cells=2, jitter=4)
    rng = np.random.default_rng(0)
    cells = {0: (slice(0, 6), slice(0, 6)), 1: (slice(0, 6), slice(6, 12)),
             2: (slice(6, 12), slice(0, 6)), 3: (slice(6, 12), slice(6, 12))}
    corners = set()
    for _ in range(40):
        img = _draw(cfg, ((0, 0), (1, 1), (2, 0), (3, 1)), [_sprite(6, 0.0), _sprite(5, 0.25)], rng)
        for c in (0, 2):  # the cell-sized sprite covers its cell and nothing else changes there
            assert (img[(slice(None), *cells[c])] == 0.0).all()
        for c in (1, 3):
            part = img[(slice(None), *cells[c])]
            rows, cols = np.nonzero(part[0] == 0.25)
            assert len(rows) == 25 and rows.max() - rows.min() == 4 and cols.max() - cols.min() == 4  # whole
            assert ((part == 0.25) | (part == 1.0)).all()
            corners.add((c, int(rows.min()), int(cols.min())))
    assert {r for _, r, _ in corners} == {0, 1} and {k for _, _, k in corners} == {0, 1}  # it does move


def test_fill_outside_0_to_1_or_a_negative_jitter_is_refused():
    for fill, jitter in ((0.0, 2), (1.5, 2), (0.5, -1)):
        with pytest.raises(ValueError, match=rf"^fill must be in \(0, 1\] and jitter >= 0; got fill={fill}, jitter={jitter}$"):
            SceneConfig(fill=fill, jitter=jitter).validate()
    SceneConfig(fill=1.0, jitter=0).validate()


def test_make_scenes_captions_each_layout_with_the_names_of_its_sprites():
    """Synthetic sprites (one grey level each) and names: every scene's caption is its objects' names in
    reading order, each token in its object's cell, the image the drawn layout, and the names kept."""
    cfg = SceneConfig(canvas=12, cells=2, min_objects=1, max_objects=2, pool=3, jitter=0)
    sprites = [_sprite(6, v) for v in (0.0, 0.25, 0.5)]
    names = ["red fox", "owl", "sea lion"]
    sc = make_scenes(5, cfg, seed=3, _cache={"sprites": (sprites, names)})
    assert len(sc) == 5 and sc.images.shape == (5, 3, 12, 12) and sc.names == names
    for img, layout, caption, cells in zip(sc.images, sc.layouts, sc.captions, sc.token_cells):
        assert 1 <= len(layout) <= 2 and [c for c, _ in layout] == sorted(c for c, _ in layout)
        want_caption, want_cells = [], []
        want = np.ones((3, 12, 12), np.float32)
        for c, e in layout:
            words = names[e].split()
            want_caption += words
            want_cells += [c] * len(words)
            want[:, (c // 2) * 6 : (c // 2) * 6 + 6, (c % 2) * 6 : (c % 2) * 6 + 6] = (0.0, 0.25, 0.5)[e]
        assert caption == want_caption and cells == want_cells
        np.testing.assert_array_equal(img, want)
