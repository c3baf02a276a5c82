"""attnlab.viz.overlays: the lines between a scene's cells lie on the pixel boundaries between cells."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="attnlab.viz needs matplotlib (pip install 'attnlab[viz]')")

from attnlab.viz.overlays import save_caption_strip, save_word_overlay  # noqa: E402

heatmap_module = importlib.import_module("attnlab.viz.heatmap")  # (attnlab.viz.heatmap is also a function)


@pytest.fixture
def saved(monkeypatch):
    """The figures the overlay functions save (read back after they are written)."""
    figs, real = [], heatmap_module.save

    def keep(fig, path):
        figs.append(fig)
        return real(fig, path)

    monkeypatch.setattr(heatmap_module, "save", keep)
    return figs


def _lines(ax):
    """(y of each horizontal line, x of each vertical line) drawn over an axes, in data coordinates."""
    hs = sorted(float(ln.get_ydata()[0]) for ln in ax.lines if ln.get_ydata()[0] == ln.get_ydata()[1])
    vs = sorted(float(ln.get_xdata()[0]) for ln in ax.lines if ln.get_xdata()[0] == ln.get_xdata()[1])
    return hs, vs


def test_cell_lines_lie_between_the_cells_pixels(tmp_path, saved):
    # pixel i covers [i - 0.5, i + 0.5]: a 12-pixel scene of 3 cells of 4 pixels splits at 3.5 and 7.5
    image = np.random.default_rng(0).random((3, 12, 12))  # (C, H, W)
    amap = np.array([[0.1, 0.2, 0.3], [0.0, 0.4, 0.0], [0.0, 0.0, 0.0]])
    out = save_word_overlay(image, amap, "cat", tmp_path / "w.png", cells=3)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = saved[0].axes
    assert _lines(ax) == ([3.5, 7.5], [3.5, 7.5])
    assert ax.get_title() == "cat"
    over = ax.images[1]  # the map stretched over the whole image, corner to corner
    assert tuple(over.get_extent()) == (-0.5, 11.5, 11.5, -0.5)
    np.testing.assert_array_equal(np.asarray(over.get_array()), amap)
    assert over.get_clim() == (0.0, 0.4)  # scaled to the map's maximum

    # (H, W) grey image of 8 pixels, 4 cells of 2: lines at 1.5, 3.5, 5.5 on the image and on every word's panel
    grey = np.random.default_rng(1).random((8, 8))
    maps = np.random.default_rng(2).random((2, 4, 4))
    save_caption_strip(grey, maps, ["a", "dog"], tmp_path / "s.png", cells=4)
    axes = saved[1].axes
    assert [a.get_title() for a in axes] == ["image", f"a ({maps[0].max():.2f})", f"dog ({maps[1].max():.2f})"]
    for a in axes:
        assert _lines(a) == ([1.5, 3.5, 5.5], [1.5, 3.5, 5.5])
    save_word_overlay(grey, maps[0], "one", tmp_path / "one.png", cells=1)  # one cell: no lines
    assert len(saved[2].axes[0].lines) == 0


def test_the_overlay_grid_has_a_row_per_image_titled_columns_and_blank_unused_panels(tmp_path, saved):
    from attnlab.viz.overlays import save_overlay_grid

    rng = np.random.default_rng(3)
    images = [rng.random((3, 8, 8)), rng.random((8, 8))]
    maps = [[rng.random((2, 2)), rng.random((2, 2))], [rng.random((2, 2))]]
    out = save_overlay_grid(images, maps, tmp_path / "g.png", column_titles=["image", "SE", "CBAM"],
                            row_titles=["first", "second"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = np.array(saved[0].axes).reshape(2, 3)
    assert [a.get_title() for a in axes[0]] == ["image", "SE", "CBAM"]
    assert [a.get_ylabel() for a in axes[:, 0]] == ["first", "second"]
    np.testing.assert_array_equal(np.asarray(axes[0, 2].images[1].get_array()), maps[0][1])  # each map over its image
    assert not axes[1, 2].axison and axes[1, 1].axison  # the second image has one map: its last panel is blank


def test_channels_last_scenes_get_their_cell_lines_and_grey_images_a_grey_colour_map(tmp_path, saved):
    # (H, W, 3) with 12 pixels a side and 4 cells of 3 pixels: lines at 2.5, 5.5 and 8.5
    image = np.random.default_rng(4).random((12, 12, 3))
    save_word_overlay(image, np.eye(4), "sun", tmp_path / "hwc.png", cells=4)
    (ax,) = saved[0].axes
    assert _lines(ax) == ([2.5, 5.5, 8.5], [2.5, 5.5, 8.5])
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), image)  # drawn as is, in colour
    # a grey image, (H, W) or (1, H, W), is drawn in grey, not in a false-colour map
    for grey in (np.random.default_rng(5).random((8, 8)), np.random.default_rng(6).random((1, 8, 8))):
        save_word_overlay(grey, np.eye(2), "moon", tmp_path / "g.png")
        shown = saved[-1].axes[0].images[0]
        assert shown.get_cmap().name == "gray"
        np.testing.assert_array_equal(np.asarray(shown.get_array()), grey.reshape(8, 8))
