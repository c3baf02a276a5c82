"""attnlab.viz.overlays read back from matplotlib (figure sizes, titles and their type, the map's colour map,
transparency, limits, extent and stored dtype, the cell lines), and the CJK font choice: which texts ask for
a CJK font, which font is chosen, what rcParams it sets, and the warning when there is none."""

from __future__ import annotations

import importlib
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

matplotlib = pytest.importorskip(
    "matplotlib", reason="attnlab.viz needs matplotlib (pip install 'attnlab[viz]')"
)
matplotlib.use("Agg")

from attnlab.viz import fonts, overlays  # noqa: E402

hm = importlib.import_module("attnlab.viz.heatmap")


@pytest.fixture
def saved(monkeypatch):
    """The figures the overlay functions save, kept open to be read back."""
    figs, real = [], hm.save

    def keep(fig, path):
        figs.append(fig)
        return real(fig, path)

    monkeypatch.setattr(hm, "save", keep)
    yield figs
    import matplotlib.pyplot as plt

    plt.close("all")


def _png_size(path):
    data = path.read_bytes()
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _check_over(ax, amap, h, w, vmax):
    over = ax.images[1]
    assert (
        over.get_cmap().name == "jet"
        and over.get_alpha() == 0.45
        and over.get_interpolation() == "nearest"
    )
    assert tuple(over.get_extent()) == (-0.5, w - 0.5, h - 0.5, -0.5)
    assert over.get_clim() == (0.0, vmax)
    arr = np.asarray(over.get_array())
    assert arr.dtype == np.float64
    np.testing.assert_array_equal(arr, np.asarray(amap, np.float64))


def test_overlay_grid_sizes_titles_and_maps(tmp_path, saved):
    rng = np.random.default_rng(0)
    images = [rng.random((6, 8)), rng.random((6, 8))]
    maps = [[np.array([[0.5, 0.25]], np.float32), rng.random((2, 2))], [rng.random((3, 3))]]
    out = overlays.save_overlay_grid(
        images,
        maps,
        tmp_path / "g.png",
        column_titles=["image", "A", "B", "extra"],
        row_titles=["r1", "r2"],
    )
    assert out == tmp_path / "g.png" and _png_size(out) == (
        round(3 * 1.6 * 120),
        round(2 * 1.6 * 120),
    )
    fig = saved[0]
    np.testing.assert_allclose(fig.get_size_inches(), (3 * 1.6, 2 * 1.6))
    axes = np.array(fig.axes).reshape(2, 3)
    assert [a.get_title() for a in axes[0]] == [
        "image",
        "A",
        "B",
    ]  # titles past the columns are left out
    assert {a.title.get_fontsize() for a in axes[0]} == {7.0}
    assert [a.get_title() for a in axes[1]] == ["", "", ""]
    assert [a.get_ylabel() for a in axes[:, 0]] == ["r1", "r2"]
    assert {a.yaxis.label.get_fontsize() for a in axes[:, 0]} == {7.0}
    for r in range(2):
        first = axes[r, 0].images[0]
        assert first.get_cmap().name == "gray" and first.get_interpolation() == "nearest"
        assert len(axes[r, 0].get_xticks()) == 0 and len(axes[r, 0].get_yticks()) == 0
    _check_over(axes[0, 1], maps[0][0], 6, 8, 1.0)
    _check_over(axes[0, 2], maps[0][1], 6, 8, 1.0)
    _check_over(axes[1, 1], maps[1][0], 6, 8, 1.0)
    assert [a.axison for a in axes[1]] == [True, True, False]


def test_overlay_grid_without_titles(tmp_path, saved):
    overlays.save_overlay_grid([np.zeros((4, 4))], [[np.ones((2, 2))]], tmp_path / "n.png")
    axes = saved[0].axes
    assert [a.get_title() for a in axes] == ["", ""] and axes[0].get_ylabel() == ""


def test_word_overlay_size_title_and_scale(tmp_path, saved):
    image = np.random.default_rng(1).random((3, 6, 6))  # (C, H, W) drawn as (H, W, C)
    amap = np.array([[0.1, 0.3], [0.2, 0.0]])
    out = overlays.save_word_overlay(image, amap, "cat", tmp_path / "w.png")
    assert _png_size(out) == (round(2.4 * 120), round(2.6 * 120))
    (ax,) = saved[0].axes
    np.testing.assert_allclose(saved[0].get_size_inches(), (2.4, 2.6))
    assert ax.get_title() == "cat" and ax.title.get_fontsize() == 10.0
    np.testing.assert_array_equal(np.asarray(ax.images[0].get_array()), image.transpose(1, 2, 0))
    _check_over(ax, amap, 6, 6, 0.3)
    assert len(ax.lines) == 0  # no cells given: no lines
    overlays.save_word_overlay(image, np.zeros((2, 2)), "none", tmp_path / "z.png")
    assert saved[1].axes[0].images[1].get_clim() == (0.0, 1.0)  # an all-zero map scales to 1


def test_caption_strip_size_titles_and_scale(tmp_path, saved):
    image = np.random.default_rng(2).random((8, 8, 3))
    maps = np.array([[[0.5, 0.25], [0.125, 0.125]], [[1.0, 0.0], [0.0, 0.0]]])
    overlays.save_caption_strip(image, maps, ["a", "dog"], tmp_path / "s.png", title="a dog")
    fig = saved[0]
    np.testing.assert_allclose(fig.get_size_inches(), (1.7 * 3, 2.0))
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["a dog", "a (0.50)", "dog (1.00)"]
    assert {a.title.get_fontsize() for a in axes} == {9.0}
    np.testing.assert_array_equal(np.asarray(axes[0].images[0].get_array()), image)
    for ax, amap in zip(axes[1:], maps):
        _check_over(ax, amap, 8, 8, 1.0)
    assert all(len(a.lines) == 0 for a in axes)
    overlays.save_caption_strip(image, maps[:1], ["a"], tmp_path / "t.png")
    assert saved[1].axes[0].get_title() == "image"


def test_cell_lines_are_thin_grey_and_split_the_images_width(tmp_path, saved):
    # (C, H, W) = (3, 6, 12): the scene's side is its width, 12 pixels; 2 cells split at 5.5
    overlays.save_word_overlay(
        np.zeros((3, 6, 12)), np.ones((2, 2)), "w", tmp_path / "a.png", cells=2
    )
    (ax,) = saved[0].axes
    assert len(ax.lines) == 2
    for line in ax.lines:
        assert line.get_color() == "grey" and line.get_linewidth() == 0.6
    horizontal, vertical = ax.lines
    assert list(horizontal.get_ydata()) == [5.5, 5.5] and list(vertical.get_xdata()) == [5.5, 5.5]
    overlays.save_word_overlay(
        np.zeros((6, 12, 3)), np.ones((2, 2)), "w", tmp_path / "b.png", cells=3
    )
    ys = sorted(float(ln.get_ydata()[0]) for ln in saved[1].axes[0].lines[::2])
    assert ys == [3.5, 7.5]  # (H, W, C): the width is the second size
    overlays.save_word_overlay(
        np.zeros((6, 12)), np.ones((2, 2)), "w", tmp_path / "c.png", cells=None
    )
    assert len(saved[2].axes[0].lines) == 0


def test_without_matplotlib_the_overlays_and_pictures_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ValueError) as e:
        overlays._plt()
    assert str(e.value) == "drawing overlays needs matplotlib: pip install 'attnlab[viz]'"
    with pytest.raises(ImportError) as e:
        hm._plt()
    assert str(e.value) == "attnlab.viz needs matplotlib: pip install 'attnlab[viz]'"
    assert hm.pyplot_or_none() is None


# --- which texts ask for a CJK font ---------------------------------------------------------------------------


@pytest.fixture
def no_cjk_font(monkeypatch, saved):
    """No CJK font installed: a CJK text warns, any other text must not."""
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)
    return saved


def _warns(call) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return any("no CJK font found" in str(w.message) for w in caught)


def test_each_text_of_each_picture_is_checked_for_cjk(tmp_path, no_cjk_font):
    w, cat = np.full((1, 2), 0.5), "猫"
    img, amap = np.zeros((4, 4)), np.ones((2, 2))
    calls = {
        "heatmap x": (lambda lbl: hm.heatmap(w, [lbl, "b"], ["q"])),
        "heatmap y": (lambda lbl: hm.heatmap(w, ["a", "b"], [lbl])),
        "heatmap title": (lambda lbl: hm.heatmap(w, title=lbl)),
        "head_grid x": (lambda lbl: hm.head_grid(w[None], [lbl, "b"], ["q"])),
        "head_grid y": (lambda lbl: hm.head_grid(w[None], ["a", "b"], [lbl])),
        "head_grid title": (lambda lbl: hm.head_grid(w[None], title=lbl)),
        "pattern x": (lambda lbl: hm.pattern(w > 0, [lbl, "b"], ["q"])),
        "pattern y": (lambda lbl: hm.pattern(w > 0, ["a", "b"], [lbl])),
        "pattern title": (lambda lbl: hm.pattern(w > 0, title=lbl)),
        "overlay title": (lambda lbl: hm.spatial_overlay(img, amap, title=lbl)),
        "grid column": (
            lambda lbl: overlays.save_overlay_grid(
                [img], [[amap]], tmp_path / "g.png", column_titles=[lbl]
            )
        ),
        "grid row": (
            lambda lbl: overlays.save_overlay_grid(
                [img], [[amap]], tmp_path / "g.png", row_titles=[lbl]
            )
        ),
        "word": (lambda lbl: overlays.save_word_overlay(img, amap, lbl, tmp_path / "w.png")),
        "strip word": (
            lambda lbl: overlays.save_caption_strip(img, amap[None], [lbl], tmp_path / "s.png")
        ),
        "strip title": (
            lambda lbl: overlays.save_caption_strip(
                img, amap[None], ["a"], tmp_path / "s.png", title=lbl
            )
        ),
    }
    got = {
        name: (_warns(lambda c=call: c(cat)), _warns(lambda c=call: c("cat")))
        for name, call in calls.items()
    }
    assert got == {name: (True, False) for name in calls}


# --- the font --------------------------------------------------------------------------------------------------


def test_has_cjk_reads_any_text_and_none():
    assert fonts.has_cjk(None) is False and fonts.has_cjk([]) is False
    assert fonts.has_cjk(["cat", 3, "狗"]) is True and fonts.has_cjk([3.5, "abc"]) is False
    assert (
        fonts.has_cjk(["カ"]) and fonts.has_cjk(["한"]) and fonts.has_cjk(["，"])
    )  # kana, hangul, full-width


def test_use_cjk_font_puts_the_font_first_once_and_sets_sans_serif_without_unicode_minus(
    monkeypatch,
):
    monkeypatch.setattr(fonts, "cjk_font", lambda: "Fake CJK")
    with matplotlib.rc_context(
        {
            "font.sans-serif": ["A", "Fake CJK", "B"],
            "font.family": ["serif"],
            "axes.unicode_minus": True,
        }
    ):
        assert fonts.use_cjk_font(["狗"]) == "Fake CJK"
        assert matplotlib.rcParams["font.sans-serif"] == ["Fake CJK", "A", "B"]
        assert matplotlib.rcParams["font.family"] == ["sans-serif"]
        assert matplotlib.rcParams["axes.unicode_minus"] is False
        assert fonts.use_cjk_font() == "Fake CJK"  # no texts: always
        assert matplotlib.rcParams["font.sans-serif"] == ["Fake CJK", "A", "B"]
    with matplotlib.rc_context({"font.sans-serif": [], "axes.unicode_minus": True}):
        assert fonts.use_cjk_font(["狗"]) == "Fake CJK"
        assert matplotlib.rcParams["font.sans-serif"] == ["Fake CJK"]
    with matplotlib.rc_context({"font.family": ["serif"], "axes.unicode_minus": True}):
        assert fonts.use_cjk_font(["dog"]) is None  # nothing Chinese: nothing changes
        assert (
            matplotlib.rcParams["font.family"] == ["serif"]
            and matplotlib.rcParams["axes.unicode_minus"] is True
        )


def test_without_a_cjk_font_the_warning_names_the_packages_and_points_at_the_caller(monkeypatch):
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)
    with pytest.warns(UserWarning) as caught:
        assert fonts.use_cjk_font(["猫"]) is None
    (w,) = caught
    assert str(w.message) == (
        "no CJK font found: Chinese labels will show as boxes; install a CJK font, e.g. "
        "`apt-get install fonts-wqy-microhei` (or fonts-noto-cjk)"
    )
    assert w.filename == __file__


def _fake_fonts(monkeypatch, names):
    from matplotlib import font_manager

    monkeypatch.setattr(fonts, "FILES", ())
    monkeypatch.setattr(
        font_manager.fontManager, "ttflist", [SimpleNamespace(name=n) for n in names]
    )
    fonts.cjk_font.cache_clear()


@pytest.mark.parametrize(
    "names, chosen",
    [
        (
            ["DejaVu Sans", "SimHei", "Noto Sans CJK SC"],
            "Noto Sans CJK SC",
        ),  # the candidates' order, not the list's
        (["DejaVu Sans", "PingFang SC"], "PingFang SC"),
        (
            ["Zed CJK Mono", "Ayu Hei", "DejaVu Sans"],
            "Ayu Hei",
        ),  # else a name that says so, in sorted order
        (["My WenQuanYi"], "My WenQuanYi"),
        (["Some CJK"], "Some CJK"),
        (["DejaVu Sans", "Liberation Serif"], None),
    ],
)
def test_cjk_font_prefers_the_known_families_then_any_cjk_named_one(monkeypatch, names, chosen):
    try:
        _fake_fonts(monkeypatch, names)
        assert fonts.cjk_font() == chosen
    finally:
        fonts.cjk_font.cache_clear()


def test_cjk_font_reads_a_known_font_file_first(monkeypatch, tmp_path):
    from matplotlib import font_manager

    added = []
    monkeypatch.setattr(font_manager.fontManager, "addfont", lambda path: added.append(path))
    monkeypatch.setattr(
        font_manager,
        "FontProperties",
        lambda fname: SimpleNamespace(get_name=lambda: f"from {fname}"),
    )
    missing, present = tmp_path / "missing.ttc", tmp_path / "there.ttc"
    present.write_bytes(b"")
    monkeypatch.setattr(fonts, "FILES", (str(missing), str(present)))
    fonts.cjk_font.cache_clear()
    try:
        assert fonts.cjk_font() == f"from {present}"
        assert added == [str(present)]
    finally:
        fonts.cjk_font.cache_clear()


def test_the_known_fonts_are_listed():
    assert fonts.CANDIDATES[:3] == ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC")
    assert fonts.FILES[0] == "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
