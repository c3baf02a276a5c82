"""head_grid, alignment, pattern and spatial_overlay read back from matplotlib: figure sizes, panel titles and
their type, axis names, ticks, colour maps and limits, markers, legends' place, grid lines, notes."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip(
    "matplotlib", reason="attnlab.viz needs matplotlib (pip install 'attnlab[viz]')"
)
matplotlib.use("Agg")

hm = importlib.import_module("attnlab.viz.heatmap")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _texts(labels):
    return [t.get_text() for t in labels]


def _panels(fig):
    return [a for a in fig.axes if a.images]


def _anchor(ax, legend):
    pts = ax.transAxes.inverted().transform(legend.get_bbox_to_anchor().get_points())
    return tuple(np.round(pts[0], 6))


# --- head_grid -----------------------------------------------------------------------------------------------


def test_head_grid_of_layers_titles_each_panel_by_layer_and_head_and_shares_one_scale():
    w = np.random.default_rng(0).random((2, 2, 3, 3)) * 0.5
    w[1, 1, 2, 2] = 0.75  # the largest weight of all the heads
    fig = hm.head_grid(torch.tensor(w), ["a", "b", "c"], ["x", "y", "z"], title="grid")
    np.testing.assert_allclose(
        fig.get_size_inches(), (2 * 2.0 + 1.5, 2 * 2.0 + 1.2)
    )  # 0.4 · 3 + 0.8 a panel
    panels = _panels(fig)
    assert [a.get_title() for a in panels] == [
        "layer 1 head 1",
        "layer 1 head 2",
        "layer 2 head 1",
        "layer 2 head 2",
    ]
    assert {a.title.get_fontsize() for a in panels} == {9.0}
    for a, wi in zip(panels, w.reshape(4, 3, 3)):
        im = a.images[0]
        assert im.get_clim() == (0.0, 0.75) and im.get_cmap().name == "viridis"
        np.testing.assert_allclose(np.ma.getdata(im.get_array()), wi, rtol=1e-12)
        assert _texts(a.get_xticklabels()) == ["a", "b", "c"] and _texts(a.get_yticklabels()) == [
            "x",
            "y",
            "z",
        ]
        assert len(a.texts) == 0  # not annotated by default
    assert [a.get_xlabel() for a in panels] == ["", "", "key", "key"]
    assert [a.get_ylabel() for a in panels] == ["query", "", "query", ""]
    assert fig._suptitle.get_text() == "grid"
    (bar,) = [a for a in fig.axes if not a.images]
    assert bar.get_ylabel() == "weight"
    assert fig.texts == [] or all(t is fig._suptitle for t in fig.texts)
    fig.canvas.draw()
    boxes = [a.get_position() for a in panels]
    span = max(b.y1 for b in boxes) - min(b.y0 for b in boxes)
    assert bar.get_position().height / span == pytest.approx(
        0.6, abs=2e-3
    )  # shrink 0.6 of the whole grid


def test_head_grid_of_one_layer_titles_heads_and_takes_the_callers_options():
    w = np.full((3, 2, 4), 0.25)
    fig = hm.head_grid(w, annotate=True, cmap="plasma", xlabel="keys", ylabel="queries")
    np.testing.assert_allclose(fig.get_size_inches(), (3 * 2.4 + 1.5, 1.6 + 1.2))
    panels = _panels(fig)
    assert [a.get_title() for a in panels] == ["head 1", "head 2", "head 3"]
    assert {a.images[0].get_cmap().name for a in panels} == {"plasma"}
    assert [len(a.texts) for a in panels] == [8, 8, 8]
    assert [a.get_xlabel() for a in panels] == ["keys"] * 3 and [
        a.get_ylabel() for a in panels
    ] == ["queries", "", ""]
    assert _texts(panels[0].get_xticklabels()) == ["1", "2", "3", "4"]
    assert fig._suptitle is None


def test_head_grid_title_wraps_to_the_grid_width():
    title = " ".join(["word"] * 12)
    fig = hm.head_grid(
        np.full((1, 1, 1), 1.0), title=title
    )  # 1.2 + 1.5 = 2.7 inches: 24 characters a line
    assert (
        fig._suptitle.get_text() == "word word word word word\nword word word word word\nword word"
    )


def test_a_panel_of_1_2_inches_keeps_its_ticks_and_9_point_title():
    fig = hm.head_grid(np.ones((1, 1, 1)))  # one key: 0.4 + 0.8 = 1.2 inches
    np.testing.assert_allclose(fig.get_size_inches(), (2.7, 2.4))
    (a,) = _panels(fig)
    assert (
        a.title.get_fontsize() == 9.0
        and _texts(a.get_xticklabels()) == ["1"]
        and a.get_xlabel() == "key"
    )
    assert fig.texts == []


def test_many_heads_get_small_panels_without_tick_labels_and_a_note():
    fig = hm.head_grid(np.full((32, 3, 3), 1 / 3))  # 28 inches for 32 panels: 0.875 each
    np.testing.assert_allclose(fig.get_size_inches(), (28.0 + 1.5, 2.0 + 1.2))
    panels = _panels(fig)
    assert {a.title.get_fontsize() for a in panels} == {6.0}
    assert all(len(a.get_xticks()) == 0 and len(a.get_yticks()) == 0 for a in panels)
    assert {a.get_xlabel() for a in panels} == {""} and {a.get_ylabel() for a in panels} == {""}
    (note,) = fig.texts
    assert note.get_text() == "32 panels of 3 × 3: tick labels left out"
    assert tuple(note.get_position()) == (0.01, 0.002) and note.get_fontsize() == 7.0
    assert (note.get_ha(), note.get_va()) == ("left", "bottom")
    np.testing.assert_allclose(
        matplotlib.colors.to_rgba(note.get_color()), (0x55 / 255,) * 3 + (1.0,)
    )


@pytest.mark.parametrize("n, ticks", [(192, True), (193, False)])
def test_head_grid_labels_ticks_up_to_192_tokens(n, ticks):
    fig = hm.head_grid(np.full((1, n, 2), 0.5))
    (a,) = _panels(fig)
    assert (len(a.get_yticks()) > 0) == ticks
    assert (a.get_ylabel() == "query") == ticks
    notes = " ".join(t.get_text() for t in fig.texts)
    assert (f"1 panels of {n} × 2: tick labels left out" in notes) == (not ticks)


def test_head_grid_without_a_finite_weight_scales_to_1_and_checks_its_mask():
    fig = hm.head_grid(np.full((1, 2, 2), np.nan))
    assert _panels(fig)[0].images[0].get_clim() == (0.0, 1.0)
    with pytest.raises(ValueError) as e:
        hm.head_grid(np.ones((1, 2, 2)), masked=np.zeros(3, bool))
    assert str(e.value) == "masked must have 2 or 3 or 4 dimensions; got shape (3,)"
    with pytest.raises(ValueError) as e:
        hm.head_grid(np.ones((2, 2)))
    assert str(e.value) == "weights must have 3 or 4 dimensions; got shape (2, 2)"
    with pytest.raises(ValueError) as e:
        hm.head_grid(np.ones((1, 2, 3)), x_labels=["a"])
    assert str(e.value) == "x_labels has 1 labels for 3 positions"
    with pytest.raises(ValueError) as e:
        hm.head_grid(np.ones((1, 2, 3)), y_labels=["a"])
    assert str(e.value) == "y_labels has 1 labels for 2 positions"


# --- alignment -----------------------------------------------------------------------------------------------


def test_alignment_draws_greys_with_source_across_the_top_and_the_best_source_word_outlined():
    w = np.array([[0.1, 0.7, 0.2], [0.6, np.nan, 0.4]])  # target × source
    fig = hm.alignment(w, ["le", "chat", "noir"], ["the", "cat"], title="fr → en")
    ax = fig.axes[0]
    im = ax.images[0]
    assert im.get_cmap().name == "Greys" and im.get_clim() == (0.0, 0.7)
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("source", "target", "fr → en")
    assert ax.xaxis.get_ticks_position() == "top" and ax.xaxis.get_label_position() == "top"
    assert _texts(ax.get_xticklabels()) == ["le", "chat", "noir"] and _texts(
        ax.get_yticklabels()
    ) == ["the", "cat"]
    assert len(ax.texts) == 0  # not annotated by default
    (marks,) = ax.collections
    np.testing.assert_array_equal(
        np.asarray(marks.get_offsets()), [[1.0, 0.0], [0.0, 1.0]]
    )  # the NaN is skipped
    assert len(marks.get_facecolor()) == 0  # hollow squares
    np.testing.assert_allclose(marks.get_edgecolor(), [[1.0, 0.0, 0.0, 1.0]])
    assert (
        list(marks.get_sizes()) == [120]
        and list(marks.get_linewidths()) == [1.2]
        and marks.get_zorder() == 3
    )
    np.testing.assert_array_equal(
        marks.get_paths()[0].vertices[:4], [[-0.5, -0.5], [0.5, -0.5], [0.5, 0.5], [-0.5, 0.5]]
    )
    legend = ax.get_legend()
    assert _texts(legend.get_texts()) == ["largest weight of each target word"]
    assert legend._loc == 2 and _anchor(ax, legend) == (0.0, -0.02)
    assert legend.get_frame_on() is False and legend.get_texts()[0].get_fontsize() == 8.0


def test_alignment_annotates_when_asked_and_outlines_up_to_48_words():
    assert (
        len(hm.alignment(np.full((2, 2), 0.5), ["a", "b"], ["x", "y"], annotate=True).axes[0].texts)
        == 4
    )
    ax48 = hm.alignment(np.full((2, 48), 1 / 48), [str(i) for i in range(48)], ["x", "y"]).axes[0]
    assert len(ax48.collections) == 1
    ax49 = hm.alignment(np.full((2, 49), 1 / 49), [str(i) for i in range(49)], ["x", "y"]).axes[0]
    assert len(ax49.collections) == 0 and ax49.get_legend() is None


# --- pattern -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, size",
    [
        ((3, 3), (1.9, 2.4)),  # 1 + 0.3 · 3 a side, plus half an inch for the title
        ((2, 4), (2.2, 2.2 * 2 / 4 + 0.5)),
        ((30, 30), (8.0, 8.5)),  # at most 8 inches
    ],
)
def test_pattern_figure_size(shape, size):
    np.testing.assert_allclose(hm.pattern(np.ones(shape, bool)).get_size_inches(), size, rtol=1e-12)


def test_pattern_draws_the_mask_in_blues_with_labels_grid_lines_and_a_legend_beside_it():
    mask = np.array([[1.0, 0.0, 0.0], [2.0, -1.0, 0.0]])  # non-zero = may attend
    fig = hm.pattern(mask, ["a", "b", "c"], ["x", "y"])
    ax = fig.axes[0]
    im = ax.images[0]
    assert np.asarray(im.get_array()).tolist() == [[True, False, False], [True, True, False]]
    assert (
        im.get_cmap().name == "Blues"
        and im.get_clim() == (0.0, 1.3)
        and im.get_interpolation() == "nearest"
    )
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")
    assert ax.get_title() == "3 of 6 pairs\nattended (50%)"  # 1.9 inches wide: 17 characters a line
    assert _texts(ax.get_xticklabels()) == ["a", "b", "c"] and _texts(ax.get_yticklabels()) == [
        "x",
        "y",
    ]
    assert list(ax.get_xticks()) == [0, 1, 2] and list(ax.get_yticks()) == [0, 1]
    assert list(ax.get_xticks(minor=True)) == [-0.5, 0.5, 1.5, 2.5]
    assert list(ax.get_yticks(minor=True)) == [-0.5, 0.5, 1.5]
    minor = ax.xaxis.get_minor_ticks()[0]
    assert minor.gridline.get_visible() and minor.gridline.get_color() == "white"
    assert minor.gridline.get_linewidth() == 0.8 and minor.tick1line.get_markersize() == 0.0
    assert not ax.xaxis.get_major_ticks()[0].gridline.get_visible()  # only the cells' edges
    legend = ax.get_legend()
    assert _texts(legend.get_texts()) == ["attended", "not attended"]
    assert legend._loc == 2 and _anchor(ax, legend) == (1.0, 1.0)
    assert legend.get_frame_on() is False and {t.get_fontsize() for t in legend.get_texts()} == {
        8.0
    }
    np.testing.assert_allclose(legend.legend_handles[1].get_edgecolor(), (0x99 / 255,) * 3 + (1.0,))


def test_pattern_numbers_its_ticks_up_to_40_tokens_and_wraps_a_given_title():
    ax = hm.pattern(np.eye(3, dtype=bool), title="a given title that is long").axes[0]
    assert _texts(ax.get_xticklabels()) == ["1", "2", "3"] and _texts(ax.get_yticklabels()) == [
        "1",
        "2",
        "3",
    ]
    assert (
        ax.get_title() == "a given title\nthat is long"
    )  # 1.9 inches: at least 12 characters a line
    ax40 = hm.pattern(np.eye(40, dtype=bool)).axes[0]
    assert (
        _texts(ax40.get_xticklabels())[:2] == ["1", "2"] and len(ax40.get_xticks(minor=True)) == 41
    )
    assert ax40.get_title() == "40 of 1600 pairs attended (2%)"
    ax41 = hm.pattern(np.eye(41, dtype=bool)).axes[0]
    assert len(ax41.get_xticks(minor=True)) == 0  # matplotlib's own ticks, no cell grid


# --- spatial_overlay -----------------------------------------------------------------------------------------


def test_upsample_gives_each_cell_its_share_of_the_image():
    a = np.arange(6.0).reshape(2, 3)
    # rows 0..4 → 0, 0, 0, 1, 1 (i · 2 // 5); columns 0..3 → 0, 0, 1, 2 (j · 3 // 4)
    np.testing.assert_array_equal(hm._upsample(a, (5, 4)), [[0, 0, 1, 2]] * 3 + [[3, 3, 4, 5]] * 2)
    np.testing.assert_array_equal(hm._upsample(a, (1, 1)), [[0.0]])


def test_spatial_overlay_shows_the_image_then_the_map_over_it():
    img = np.array([[1.0, 3.0], [5.0, 9.0]])
    att = np.array([[0.2, 0.8]])
    fig = hm.spatial_overlay(img, att, title="where")
    np.testing.assert_allclose(fig.get_size_inches(), (7.0, 3.5))
    left, right, bar = fig.axes
    assert (left.get_title(), right.get_title()) == ("image", "attention")
    assert not left.axison and not right.axison and bar.axison
    for ax in (left, right):
        shown = ax.images[0]
        np.testing.assert_allclose(
            np.asarray(shown.get_array()), (img - 1.0) / 8.0
        )  # scaled to [0, 1]
        assert shown.get_cmap().name == "gray"
    over = right.images[1]
    assert over.get_cmap().name == "jet" and over.get_alpha() == 0.5
    np.testing.assert_array_equal(np.asarray(over.get_array()), [[0.2, 0.8], [0.2, 0.8]])
    assert over.colorbar.ax is bar and bar.get_ylabel() == ""
    assert fig._suptitle.get_text() == "where"
    fig.canvas.draw()
    assert (
        0.7 < bar.get_position().height / right.get_position(original=True).height < 0.9
    )  # shrink 0.8


def test_spatial_overlay_takes_alpha_and_colour_map_and_keeps_colour_images_in_colour():
    rgb = np.random.default_rng(0).random((3, 5, 3))  # (H, W, 3): three rows, not three channels
    fig = hm.spatial_overlay(rgb, np.ones((1, 1)), alpha=0.3, cmap="hot")
    left, right, _ = fig.axes
    over = right.images[1]
    assert over.get_cmap().name == "hot" and over.get_alpha() == 0.3
    shown = np.asarray(left.images[0].get_array())
    assert shown.shape == (3, 5, 3)
    np.testing.assert_allclose(shown, (rgb - rgb.min()) / np.ptp(rgb))
    assert fig._suptitle is None
    grey1 = np.random.default_rng(1).random((1, 4, 4))  # one channel first: drawn grey
    g = hm.spatial_overlay(grey1, np.ones((2, 2)))
    assert (
        g.axes[0].images[0].get_cmap().name == "gray"
        and g.axes[1].images[0].get_cmap().name == "gray"
    )
    np.testing.assert_allclose(
        np.asarray(g.axes[0].images[0].get_array()), (grey1[0] - grey1.min()) / np.ptp(grey1)
    )
    hwc1 = hm.spatial_overlay(np.random.default_rng(2).random((4, 4, 1)), np.ones((2, 2)))
    assert hwc1.axes[1].images[0].get_cmap().name == "gray"


def test_spatial_overlay_names_a_wrong_rank():
    with pytest.raises(ValueError) as e:
        hm.spatial_overlay(np.zeros(4), np.ones((2, 2)))
    assert str(e.value) == "image must have 2 or 3 dimensions; got shape (4,)"
    with pytest.raises(ValueError) as e:
        hm.spatial_overlay(np.zeros((4, 4)), np.ones(2))
    assert str(e.value) == "attention must have 2 dimensions; got shape (2,)"
