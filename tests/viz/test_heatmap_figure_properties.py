"""attnlab.viz.heatmap's pictures read back from matplotlib: sizes, labels, ticks, colour scale, hatching,
annotations, legends, notes; and the helpers that size, pool, label and wrap them (values worked by hand)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip(
    "matplotlib", reason="attnlab.viz needs matplotlib (pip install 'attnlab[viz]')"
)
matplotlib.use("Agg")

hm = importlib.import_module("attnlab.viz.heatmap")  # (attnlab.viz.heatmap is also the function)

GREY_FACE = (0xEE / 255, 0xEE / 255, 0xEE / 255, 1.0)  # "#eeeeee"
GREY_EDGE = (0xAA / 255, 0xAA / 255, 0xAA / 255, 1.0)  # "#aaaaaa"
NOTE_GREY = (0x55 / 255, 0x55 / 255, 0x55 / 255, 1.0)  # "#555555"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _texts(labels):
    return [t.get_text() for t in labels]


def _legend_anchor(ax, legend):
    """The legend's anchor point in the axes' coordinates."""
    pts = ax.transAxes.inverted().transform(legend.get_bbox_to_anchor().get_points())
    return tuple(np.round(pts[0], 6))


# --- the helpers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, inches",
    [
        (1, 0.5),
        (10, 5.0),
        (24, 12.0),  # half an inch a cell
        (30, 12.0),
        (86, 12.0),  # at least 12 inches once half an inch a cell is more
        (90, 12.5),
        (144, 20.0),  # a label's height (10 pt) a cell: n · 10 / 72
        (200, 0.8 * 4000 / 120 - 3),
        (5000, 0.8 * 4000 / 120 - 3),  # capped: 23.67 inches
    ],
)
def test_side_gives_half_an_inch_a_cell_then_a_labels_height_then_a_cap(n, inches):
    assert hm._side(n) == pytest.approx(inches, rel=1e-12)


@pytest.mark.parametrize(
    "n, side, ticks",
    [
        (10, 12.0, 48),
        (48, 12.0, 48),
        (60, 12.0, 60),
        (86, 12.0, 86),  # every token while 10 pt fit
        (90, 12.5, 90),
        (91, 12.5, 48),  # 900 pt on 12.5 inches is exactly full; 910 is not
        (200, 23.0, 48),
    ],
)
def test_max_ticks_labels_every_token_while_each_cell_is_a_label_high(n, side, ticks):
    assert hm._max_ticks(n, side) == ticks


def test_module_constants_are_the_documented_ones():
    assert (hm.MAX_PX, hm.DPI, hm.MAX_TICKS, hm.SMALL_PT, hm.CELL_PT) == (4000, 120, 48, 7, 10)


def test_ticks_label_each_position_from_1_or_every_nth_and_centre_them_on_pooled_cells():
    assert hm._ticks(3, None, 1) == ([0.0, 1.0, 2.0], ["1", "2", "3"], 1)
    assert hm._ticks(3, ["a", "b", "c"], 1) == ([0.0, 1.0, 2.0], ["a", "b", "c"], 1)
    # 5 positions, at most 2 ticks: every 3rd (positions 1 and 4); pooled 2 × 2, position i is at (i + 0.5) / 2 - 0.5
    assert hm._ticks(5, list("abcde"), 2, max_ticks=2) == ([-0.25, 1.25], ["a", "d"], 3)
    assert hm._ticks(4, None, 1, max_ticks=4) == ([0.0, 1.0, 2.0, 3.0], ["1", "2", "3", "4"], 1)
    pos, labels, step = hm._ticks(100, None, 1)  # the default: at most 48 ticks, so every 3rd
    assert step == 3 and labels[:3] == ["1", "4", "7"] and len(labels) == 34 and pos[1] == 3.0


def test_pool_block_averages_leaving_nan_cells_out_of_the_means():
    w = np.arange(15.0).reshape(5, 3)
    same, f = hm._pool(w, 5)
    assert f == 1 and same is w
    pooled, f = hm._pool(w, 2)  # ceil(5 / 2) = 3: (5, 3) padded to (6, 3) → 2 × 1 blocks of 3 × 3
    assert f == 3
    np.testing.assert_array_equal(pooled, [[w[:3].mean()], [w[3:].mean()]])
    w2 = np.array([[1.0, np.nan, 5.0, 7.0], [3.0, np.nan, np.nan, np.nan]])
    pooled, f = hm._pool(
        w2, 2
    )  # 2 × 2 blocks: the left block's mean of 1 and 3, the right one's 5 and 7
    assert f == 2
    np.testing.assert_array_equal(pooled, [[2.0, 6.0]])
    nan_block, _ = hm._pool(np.array([[np.nan, np.nan, 1.0, 1.0]] * 2), 2)
    assert np.isnan(nan_block[0, 0]) and nan_block[0, 1] == 1.0
    _, f = hm._pool(np.ones((3, 3)), 0)  # no room at all: one cell for everything
    assert f == 3


def test_wrap_fits_about_9_characters_an_inch_and_never_fewer_than_12():
    text = "aaaa bbbb cccc dddd eeee ffff"
    assert hm._wrap(text, 3.0) == "aaaa bbbb cccc dddd eeee\nffff"  # 27 characters a line
    assert hm._wrap(text, 1.0) == "aaaa bbbb\ncccc dddd\neeee ffff"  # 12, not 9
    assert hm._wrap(text, 2.0) == "aaaa bbbb cccc\ndddd eeee ffff"  # 18 characters a line
    assert hm._wrap("", 3.0) == ""
    assert hm._wrap("short", 0.1) == "short"


def test_wrap_at_two_inches_allows_18_characters():
    assert hm._wrap("a" * 18 + " b", 2.0) == "a" * 18 + "\nb"
    assert hm._wrap("a" * 16 + " b", 2.0) == "a" * 16 + " b"


def test_as_array_gives_float64_or_bool_and_names_the_wrong_rank():
    a = hm.as_array(torch.tensor([[1, 2]], dtype=torch.int32, requires_grad=False))
    assert a.dtype == np.float64 and a.tolist() == [[1.0, 2.0]]
    g = hm.as_array(torch.ones(1, 2, requires_grad=True))
    assert g.dtype == np.float64
    assert hm.as_array(np.array([[True, False]])).dtype == bool
    assert hm.as_array([[1, 2], [3, 4]]).dtype == np.float64
    assert hm.as_array(np.zeros((1, 2, 3)), dims=(2, 3)).shape == (1, 2, 3)
    with pytest.raises(ValueError) as e:
        hm.as_array(np.zeros(3))
    assert str(e.value) == "weights must have 2 dimensions; got shape (3,)"
    with pytest.raises(ValueError) as e:
        hm.as_array(np.zeros(3), name="image", dims=(2, 3))
    assert str(e.value) == "image must have 2 or 3 dimensions; got shape (3,)"


def test_labels_are_strings_of_the_right_count():
    assert hm._labels("x_labels", None, 3) is None
    assert hm._labels("x_labels", [1, "b"], 2) == ["1", "b"]
    with pytest.raises(ValueError) as e:
        hm._labels("y_labels", ["a"], 4)
    assert str(e.value) == "y_labels has 1 labels for 4 positions"


def test_pyplot_or_none_is_pyplot_on_agg():
    import matplotlib.pyplot as plt

    assert hm.pyplot_or_none() is plt
    assert matplotlib.get_backend().lower() == "agg"


# --- heatmap -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q, k, size",
    [
        (3, 2, (4.0, 3.1)),  # at least 4 inches wide; 1.6 + 0.5 · 3 high
        (2, 2, (4.0, 2.6)),
        (1, 1, (4.0, 2.5)),  # at least 2.5 inches high
        (4, 10, (7.2, 3.6)),  # 2.2 + 0.5 · 10 wide
    ],
)
def test_heatmap_figure_size(q, k, size):
    fig = hm.heatmap(np.full((q, k), 1.0 / k))
    np.testing.assert_allclose(fig.get_size_inches(), size, rtol=1e-12)


def test_heatmap_draws_the_weights_with_its_labels_scale_and_colour_bar():
    w = np.array([[0.1, 0.9], [0.5, 0.5], [0.7, 0.3]])
    fig = hm.heatmap(
        torch.tensor(w), ["k1", "k2"], ["q1", "q2", "q3"], title="the title", cmap="magma"
    )
    ax, bar = fig.axes
    im = ax.images[0]
    assert (
        im.get_cmap().name == "magma"
        and im.get_interpolation() == "nearest"
        and im.get_zorder() == 1
    )
    assert im.get_clim() == (0.0, 0.9)  # from 0 to the largest weight
    assert ax.get_aspect() == "auto"
    np.testing.assert_allclose(np.ma.getdata(im.get_array()), w, rtol=1e-12)
    assert not np.ma.getmaskarray(im.get_array()).any()
    assert ax.get_title() == "the title" and (ax.get_xlabel(), ax.get_ylabel()) == ("key", "query")
    assert _texts(ax.get_xticklabels()) == ["k1", "k2"] and _texts(ax.get_yticklabels()) == [
        "q1",
        "q2",
        "q3",
    ]
    assert list(ax.get_xticks()) == [0.0, 1.0] and list(ax.get_yticks()) == [0.0, 1.0, 2.0]
    assert [t.get_rotation() for t in ax.get_xticklabels()] == [0.0, 0.0]
    assert [t.get_ha() for t in ax.get_xticklabels()] == ["center", "center"]
    assert bar.get_ylabel() == "weight" and im.colorbar.ax is bar
    assert ax.get_legend() is None  # nothing masked: no legend
    assert fig.texts == []  # nothing reduced: no note
    assert isinstance(fig.get_layout_engine(), matplotlib.layout_engine.ConstrainedLayoutEngine)
    fig.canvas.draw()
    assert bar.get_position().height / ax.get_position().height == pytest.approx(
        0.8, abs=1e-6
    )  # shrink 0.8


def test_heatmap_defaults_number_the_tokens_and_leave_out_the_title():
    fig = hm.heatmap(np.full((2, 3), 1 / 3))
    ax = fig.axes[0]
    assert _texts(ax.get_xticklabels()) == ["1", "2", "3"] and _texts(ax.get_yticklabels()) == [
        "1",
        "2",
    ]
    assert ax.get_title() == "" and ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert ax.images[0].get_cmap().name == "viridis"
    assert len(ax.texts) == 6  # annotated by default


def test_heatmap_axis_names_are_the_callers():
    ax = hm.heatmap(np.eye(2), xlabel="source", ylabel="target").axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("source", "target")


def test_heatmap_title_wraps_to_the_figure_width_less_one_and_a_half_inches():
    title = " ".join(["word"] * 12)  # 59 characters
    ax = hm.heatmap(np.eye(2), title=title).axes[
        0
    ]  # 4 inches wide: 2.5 inches → 22 characters a line
    assert ax.get_title() == "word word word word\nword word word word\nword word word word"
    wide = hm.heatmap(np.full((2, 10), 0.1), title=title).axes[0]  # 7.2 inches: 5.7 → 51 characters
    assert wide.get_title() == " ".join(["word"] * 10) + "\nword word"


def test_heatmap_annotations_are_7_point_centred_and_white_on_the_top_40_percent():
    w = np.array([[0.1, 0.9], [0.5, 0.55], [0.7, 0.3]])
    masked = np.array([[True, False], [False, False], [False, False]])
    ax = hm.heatmap(w, masked=masked).axes[0]
    got = [
        (
            t.get_text(),
            tuple(t.get_position()),
            t.get_color(),
            t.get_fontsize(),
            t.get_ha(),
            t.get_va(),
            t.get_zorder(),
        )
        for t in ax.texts
    ]
    # the masked cell has no number; white where the weight is above 0.6 × 0.9 = 0.54
    assert got == [
        ("0.90", (1, 0), "white", 7.0, "center", "center", 2),
        ("0.50", (0, 1), "black", 7.0, "center", "center", 2),
        ("0.55", (1, 1), "white", 7.0, "center", "center", 2),
        ("0.70", (0, 2), "white", 7.0, "center", "center", 2),
        ("0.30", (1, 2), "black", 7.0, "center", "center", 2),
    ]


def test_heatmap_annotates_up_to_400_cells():
    assert len(hm.heatmap(np.full((20, 20), 0.05)).axes[0].texts) == 400
    assert len(hm.heatmap(np.full((20, 21), 0.05)).axes[0].texts) == 0
    assert len(hm.heatmap(np.full((2, 2), 0.5), annotate=False).axes[0].texts) == 0


def test_heatmap_annotation_of_an_all_masked_matrix_draws_nothing():
    ax = hm.heatmap(np.full((2, 2), np.nan)).axes[0]
    assert len(ax.texts) == 0 and _texts(ax.get_legend().get_texts()) == ["masked"]


def test_heatmap_hatches_masked_and_non_finite_cells_with_a_grey_patch_and_a_legend():
    w = np.array([[0.2, np.inf, 0.8], [0.5, 0.5, 0.0]])
    masked = torch.tensor([[False, False, False], [False, True, False]])
    fig = hm.heatmap(w, masked=masked)
    ax = fig.axes[0]
    shown = ax.images[0].get_array()
    assert np.ma.getmaskarray(shown).tolist() == [[False, True, False], [False, True, False]]
    np.testing.assert_array_equal(shown.compressed(), [0.2, 0.8, 0.5, 0.0])
    (patch,) = ax.patches
    assert (patch.get_xy(), patch.get_width(), patch.get_height()) == (
        (-0.5, -0.5),
        3,
        2,
    )  # under every cell
    assert patch.get_hatch() == "///" and patch.get_linewidth() == 0.0 and patch.get_zorder() == 0
    np.testing.assert_allclose(patch.get_facecolor(), GREY_FACE)
    np.testing.assert_allclose(patch.get_edgecolor(), GREY_EDGE)
    legend = ax.get_legend()
    assert _texts(legend.get_texts()) == ["masked"]
    assert legend._loc == 2 and _legend_anchor(ax, legend) == (
        1.0,
        -0.02,
    )  # upper left, under the colour bar
    assert legend.get_frame_on() is False and legend.get_texts()[0].get_fontsize() == 8.0
    (handle,) = legend.legend_handles
    assert handle.get_hatch() == "///"
    np.testing.assert_allclose(handle.get_facecolor(), GREY_FACE)
    np.testing.assert_allclose(handle.get_edgecolor(), GREY_EDGE)


@pytest.mark.parametrize(
    "masked, w, legend",
    [
        (None, np.full((2, 2), 0.5), False),
        (np.zeros((2, 2), bool), np.full((2, 2), 0.5), False),  # a mask that masks nothing
        (None, np.array([[0.5, np.nan], [0.5, 0.5]]), True),  # a missing weight
        (np.array([[False, True], [False, False]]), np.full((2, 2), 0.5), True),
    ],
)
def test_the_masked_legend_appears_exactly_when_something_is_hatched(masked, w, legend):
    ax = hm.heatmap(w, masked=masked).axes[0]
    assert (ax.get_legend() is not None) == legend


def test_many_labels_are_rotated_and_right_aligned():
    ax = hm.heatmap(np.full((2, 9), 1 / 9)).axes[0]
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {45.0}
    assert {t.get_ha() for t in ax.get_xticklabels()} == {"right"}
    eight = hm.heatmap(np.full((2, 8), 1 / 8)).axes[0]
    assert {t.get_rotation() for t in eight.get_xticklabels()} == {0.0}
    assert {t.get_ha() for t in eight.get_xticklabels()} == {"center"}


def test_a_label_for_each_of_more_than_48_tokens_is_set_in_small_type():
    ax = hm.heatmap(np.full((2, 60), 1 / 60)).axes[
        0
    ]  # 12 inches: 60 labels of 10 pt fit, in 7 pt type
    assert len(ax.get_xticklabels()) == 60 and len(ax.get_yticklabels()) == 2
    assert ax.xaxis.get_major_ticks()[0].label1.get_fontsize() == 7.0
    assert ax.yaxis.get_major_ticks()[0].label1.get_fontsize() == 7.0
    assert (
        hm.heatmap(np.full((2, 48), 1 / 48))
        .axes[0]
        .xaxis.get_major_ticks()[0]
        .label1.get_fontsize()
        != 7.0
    )


def test_a_long_heatmap_is_labelled_every_nth_token_with_a_note_under_it():
    fig = hm.heatmap(
        np.full((2, 200), 1 / 200), annotate=False
    )  # 23.67 inches: 200 labels do not fit
    ax = fig.axes[0]
    labels = _texts(ax.get_xticklabels())
    assert labels[:3] == ["1", "6", "11"] and len(labels) == 40  # every ceil(200 / 48) = 5th
    (note,) = fig.texts
    assert note.get_text() == "labels: one every 5 tokens"
    assert tuple(note.get_position()) == (0.01, 0.002) and note.get_fontsize() == 7.0
    assert (note.get_ha(), note.get_va()) == ("left", "bottom")
    np.testing.assert_allclose(matplotlib.colors.to_rgba(note.get_color()), NOTE_GREY)


def test_heatmap_pools_a_matrix_larger_than_its_pixels_and_says_so():
    # 5000 keys: 23.67 inches at 120 dpi is 2840 cells a side, so blocks of 2 × 2
    w = np.zeros((2, 5000))
    w[:, 1] = 1.0
    fig = hm.heatmap(w, annotate=True)
    ax = fig.axes[0]
    shown = np.asarray(ax.images[0].get_array())
    assert shown.shape == (1, 2500)
    assert shown[0, 0] == 0.5 and shown[0, 1] == 0.0
    assert len(ax.texts) == 0  # pooled cells are not annotated
    assert fig.texts[0].get_text() == (
        "2 × 5000 drawn as 1 × 2500 (each cell the mean of a 2 × 2 block); "
        "labels: one every 105 tokens"
    )
    assert list(ax.get_yticks()) == [-0.25, 0.25]  # token i at (i + 0.5) / 2 - 0.5


# --- save ------------------------------------------------------------------------------------------------------


def _png_size(path):
    data = path.read_bytes()
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_save_writes_120_dpi_and_scales_a_too_large_figure_down_to_4000_pixels(tmp_path):
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(5.0, 2.5))
    out = hm.save(fig, tmp_path / "deep" / "dir" / "a.PNG")  # folders made; the suffix in any case
    assert out == tmp_path / "deep" / "dir" / "a.PNG" and _png_size(out) == (600, 300)
    assert not plt.fignum_exists(fig.number)  # closed
    big = plt.figure(figsize=(50.0, 10.0))  # 6000 pixels wide: scaled by 2 / 3
    hm.save(big, tmp_path / "big.png")
    assert _png_size(tmp_path / "big.png") == (4000, 800)
    np.testing.assert_allclose(big.get_size_inches(), (50.0 * 4000 / 6000, 10.0 * 4000 / 6000))
    edge = plt.figure(figsize=(4000 / 120, 1.0))  # exactly 4000 pixels: left as it is
    hm.save(edge, tmp_path / "edge.png")
    assert _png_size(tmp_path / "edge.png") == (4000, 120)
    svg = hm.save(plt.figure(figsize=(1, 1)), tmp_path / "a.svg")
    assert "<svg" in svg.read_text()


def test_save_refuses_other_formats_by_name(tmp_path):
    import matplotlib.pyplot as plt

    fig = plt.figure()
    with pytest.raises(ValueError) as e:
        hm.save(fig, tmp_path / "x.jpg")
    assert str(e.value) == "save a figure as .png or .svg; got 'x.jpg'"
    plt.close(fig)
