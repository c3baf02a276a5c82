"""Each experiment's figure, read back from matplotlib where the experiment closes it: the figure's size, the
PNG's pixel size (size × dpi), titles, axis labels and scales, legends, and every line's, bar's or band's data
against values computed here from results written by hand. Without matplotlib a plot returns None and writes
nothing."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.experiments import (
    alignment,
    bottleneck,
    distance,
    faithfulness,
    length,
    rope_scaling,
    vision,
)

plt = pytest.importorskip("matplotlib.pyplot")
mpimg = pytest.importorskip("matplotlib.image")

NAN = float("nan")


@pytest.fixture
def closed(monkeypatch):
    """The figures the experiments close, kept open to be read; closed for real afterwards."""
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    yield figs
    monkeypatch.undo()
    for f in figs:
        plt.close(f)


def _pixels(path):
    h, w = mpimg.imread(str(path)).shape[:2]
    return w, h


def _legend(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


# -- bottleneck ------------------------------------------------------------------------------------


def test_bottleneck_plot(tmp_path, closed):
    res = {
        "config": {"data": "numbers-en-de"},
        "buckets": [[1, 9], [10, 16], [17, 30]],
        "models": {
            "none": {"by_length": [{"chrf": 98.7}, {"chrf": 94.3}, {"chrf": 64.0}]},
            "bahdanau": {"by_length": [{"chrf": 99.7}, {"chrf": 99.9}, {"chrf": 100.0}]},
        },
    }
    path = tmp_path / "b.png"
    assert bottleneck.plot(res, str(path)) == path
    assert _pixels(path) == (600, 400)  # 6 × 4 inches at 100 dpi
    (fig,) = closed
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == (6, 4)
    assert ax.get_xlabel() == "source length (tokens), numbers-en-de"
    assert ax.get_ylabel() == "chrF (test)"
    assert ax.get_title() == "The fixed-vector bottleneck and attention"
    assert _legend(ax) == ["none", "bahdanau"]
    for line, want in zip(ax.get_lines(), ([98.7, 94.3, 64.0], [99.7, 99.9, 100.0])):
        np.testing.assert_array_equal(line.get_xdata(), [5.0, 13.0, 23.5])
        np.testing.assert_array_equal(line.get_ydata(), want)
        assert line.get_marker() == "o"


# -- distance --------------------------------------------------------------------------------------


def test_distance_plot(tmp_path, closed):
    res = {
        "config": {"distances": [2, 8], "classes": 5},
        "accuracy": {
            "gru": {"2": [0.9, 0.05], "8": [0.3, NAN]},
            "attention": {"2": [1.0, 0.0], "8": [0.95, 0.1]},
        },
        "gradient_norm": {
            "gru": {"init": [5.0, 0.4, 0.3, 0.2], "trained": [6.0, 0.6, 0.5, 0.1]},
            "attention": {"init": [1.0, 0.01, 0.02, 0.03], "trained": [2.0, 0.2, 0.3, 0.4]},
        },
    }
    path = tmp_path / "d.png"
    assert distance.plot(res, path) == path
    assert _pixels(path) == (1000, 400)
    (fig,) = closed
    a1, a2 = fig.axes
    assert tuple(fig.get_size_inches()) == (10, 4)
    # left: accuracy in % against k, with the half-width as error bars (nan: none), and chance at 100 / classes
    assert (a1.get_xscale(), a1.get_xlabel(), a1.get_ylabel()) == (
        "log",
        "distance k from the cue to the query",
        "test accuracy (%)",
    )
    assert a1.get_title() == "Accuracy against distance (95 % CI over seeds)"
    assert _legend(a1) == ["chance", "gru", "attention"]  # matplotlib lists lines before error bars
    want = {"gru": ([90.0, 30.0], [5.0, 0.0]), "attention": ([100.0, 95.0], [0.0, 10.0])}
    for bars, (mu, hw) in zip(a1.containers, want.values()):
        line, caps, (vertical,) = bars.lines
        np.testing.assert_array_equal(line.get_xdata(), [2, 8])
        np.testing.assert_allclose(np.asarray(line.get_ydata(), float), mu)
        ends = np.array([seg[:, 1] for seg in vertical.get_segments()])
        np.testing.assert_allclose(ends, [[m - h, m + h] for m, h in zip(mu, hw)], atol=1e-12)
        assert (
            line.get_marker() == "o" and len(caps) == 2 and caps[0].get_markersize() == 2 * 3
        )  # capsize 3
    chance = [ln for ln in a1.get_lines() if ln.get_label() == "chance"][0]
    np.testing.assert_array_equal(chance.get_ydata(), [20.0, 20.0])
    assert chance.get_linestyle() == ":" and chance.get_color() == "grey"
    # right: the gradient against d = 1 … T − 1 (d = 0, the query itself, left out), dashed at init
    assert (a2.get_xscale(), a2.get_yscale()) == ("log", "log")
    assert (a2.get_xlabel(), a2.get_ylabel()) == (
        "distance d from the last token",
        "‖∂ logit / ∂ x_{T−d}‖",
    )
    assert a2.get_title() == "Gradient reaching a token d steps back"
    assert _legend(a2) == ["gru (init)", "gru (trained)", "attention (init)", "attention (trained)"]
    assert a2.get_legend().get_texts()[0].get_fontsize() == 7
    for line, (m, when) in zip(
        a2.get_lines(), [(m, w) for m in ("gru", "attention") for w in ("init", "trained")]
    ):
        np.testing.assert_array_equal(line.get_xdata(), [1, 2, 3])
        np.testing.assert_array_equal(line.get_ydata(), res["gradient_norm"][m][when][1:])
        assert line.get_linestyle() == ("--" if when == "init" else "-")


# -- alignment -------------------------------------------------------------------------------------


def test_alignment_plot_size_markers_and_legend(tmp_path, closed):
    res = {
        "buckets": [[3, 13], [14, 25]],
        "aer_by_length": {"diagonal": [0.7, 0.75], "bahdanau argmax": [0.6, 0.8]},
        "n_test": 400,
    }
    path = tmp_path / "a.png"
    assert alignment.plot(res, path) == path
    assert _pixels(path) == (600, 400)
    (fig,) = closed
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == (6, 4)
    assert _legend(ax) == ["diagonal", "bahdanau argmax"]
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8
    assert [ln.get_marker() for ln in ax.get_lines()] == ["o", "o"]
    assert [ln.get_linestyle() for ln in ax.get_lines()] == ["--", "-"]
    np.testing.assert_allclose(ax.get_lines()[1].get_xydata(), [[8.0, 60.0], [19.5, 80.0]])


# -- length ----------------------------------------------------------------------------------------


def test_length_plot_size_titles_and_bands(tmp_path, closed):
    row = lambda b, c: {"bleu": b, "bleu_ci": [b - 1, b + 2], "chrf": c, "chrf_ci": [c - 3, c + 4]}  # noqa: E731
    res = {
        "config": {"data": "ding-de-en"},
        "buckets": [[4, 6], [7, 19]],
        "models": {"none": {"by_length": [row(3.0, 15.0), row(1.0, 16.0)]}},
    }
    path = tmp_path / "l.png"
    assert length.plot(res, path) == path
    assert _pixels(path) == (1000, 400)
    (fig,) = closed
    assert tuple(fig.get_size_inches()) == (10, 4)
    for ax, name, key, lo, hi in (
        (fig.axes[0], "BLEU", "bleu", 1, 2),
        (fig.axes[1], "chrF", "chrf", 3, 4),
    ):
        assert ax.get_title() == f"{name} against length (95 % bootstrap band)"
        assert ax.get_xlabel() == "source sentence length (words), ding-de-en"
        (line,) = ax.get_lines()
        assert line.get_marker() == "o" and line.get_label() == "none"
        np.testing.assert_array_equal(line.get_xdata(), [5.0, 13.0])
        (band,) = ax.collections
        assert band.get_alpha() == 0.2
        xy = band.get_paths()[0].vertices
        ys = [r[key] for r in res["models"]["none"]["by_length"]]
        assert xy[:, 1].min() == min(ys) - lo and xy[:, 1].max() == max(ys) + hi


# -- faithfulness ----------------------------------------------------------------------------------


def test_faithfulness_plot(tmp_path, closed):
    def methods(base, hist):
        ms = {m: {"out_tvd": base + i / 10} for i, m in enumerate(faithfulness.METHODS)}
        ms["adversarial"]["att_jsd_hist"] = hist
        return ms

    h1, h2 = list(range(20)), [0] * 19 + [7]
    res = {
        "config": {"epsilon": 0.05},
        "models": {
            "bahdanau": {"methods": methods(0.3, h1)},
            "luong": {"methods": methods(0.5, h2)},
        },
    }
    path = tmp_path / "f.png"
    assert faithfulness.plot(res, path) == path
    assert _pixels(path) == (1320, 480)  # 11 × 4 inches at the figures' 120 dpi
    (fig,) = closed
    left, right = fig.axes
    assert tuple(fig.get_size_inches()) == (11, 4)
    # left: one group of bars per replacement, one bar per decoder (width 0.8 / 2), ticks at each group's middle
    assert left.get_ylabel() == "mean TVD of the next-token distribution"
    assert left.get_title() == "output change when the weights are replaced"
    assert _legend(left) == ["bahdanau", "luong"]
    for i, (bars, base) in enumerate(zip(left.containers, (0.3, 0.5))):
        assert [round(r.get_x() + r.get_width() / 2, 12) for r in bars] == [
            round(k + i * 0.4, 12) for k in range(4)
        ]
        np.testing.assert_allclose([r.get_width() for r in bars], [0.4] * 4)
        np.testing.assert_allclose(
            [r.get_height() for r in bars], [base, base + 0.1, base + 0.2, base + 0.3]
        )
    np.testing.assert_allclose(left.get_xticks(), [0.2, 1.2, 2.2, 3.2])
    assert [t.get_text() for t in left.get_xticklabels()] == list(faithfulness.METHODS)
    # right: the adversary's histogram of attention JSD over 20 bins of [0, 0.7]
    assert right.get_xlabel() == "JSD(adversarial weights, learned weights), nats"
    assert right.get_ylabel() == "target positions"
    assert right.get_title() == "adversarial weights with output TVD ≤ 0.05"
    assert _legend(right) == ["bahdanau", "luong"]
    for stairs, hist in zip(right.patches[-2:], (h1, h2)):
        values, edges, _ = stairs.get_data()
        np.testing.assert_array_equal(values, hist)
        np.testing.assert_allclose(edges, np.linspace(0.0, 0.7, 21), atol=1e-15)


# -- rope scaling ----------------------------------------------------------------------------------


def test_rope_scaling_plot(tmp_path, closed):
    res = {
        "config": {"lengths": [16, 32, 64], "block_size": 16, "factor": 4.0},
        "methods": {
            "rope": {"16": 2.0, "32": 2.5, "64": 3.1},
            "alibi": {"16": 2.1, "32": 2.1, "64": 2.0},
        },
    }
    path = tmp_path / "r.png"
    assert rope_scaling.plot(res, path) == path
    assert _pixels(path) == (720, 480)  # 6 × 4 inches at 120 dpi
    (fig,) = closed
    (ax,) = fig.axes
    assert tuple(fig.get_size_inches()) == (6, 4)
    assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
    assert ax.get_xlabel() == "evaluation length n (characters)"
    assert ax.get_ylabel() == "validation loss (nats / char)"
    assert ax.get_title() == "Beyond the trained context (s = 4)"
    assert _legend(ax) == ["rope", "alibi", "trained length"]
    assert ax.get_legend().get_texts()[0].get_fontsize() == 8
    rope, alibi, trained = ax.get_lines()
    for line, want in ((rope, [2.0, 2.5, 3.1]), (alibi, [2.1, 2.1, 2.0])):
        np.testing.assert_array_equal(line.get_xdata(), [16, 32, 64])
        np.testing.assert_array_equal(line.get_ydata(), want)
        assert line.get_marker() == "o"
    np.testing.assert_array_equal(trained.get_xdata(), [16, 16])
    assert trained.get_linestyle() == ":" and trained.get_color() == "grey"


# -- vision ----------------------------------------------------------------------------------------


def test_vision_plot_size_titles_and_zero_line(tmp_path, closed):
    cfg = vision.VisionConfig(
        variants=("none", "cbam"), seeds=(0,), train_sizes=(50, 100), out_dir=None
    )
    res = vision.VisionResult(
        cfg,
        {"none": {50: [0.5], 100: [0.6]}, "cbam": {50: [0.55], 100: [0.58]}},
        params={},
        seconds={},
        box_mass=[],
        box_chance=[],
    )
    path = tmp_path / "v.png"
    assert vision._plot(res, path) == path
    assert _pixels(path) == (1000, 400)
    (fig,) = closed
    a1, a2 = fig.axes
    assert tuple(fig.get_size_inches()) == (10, 4)
    assert (a1.get_xlabel(), a2.get_xlabel()) == ("training canvases", "training canvases")
    assert a1.get_title() == "Learning curve (95 % CI)"
    assert a2.get_title() == "Paired difference to the plain CNN (95 % CI)"
    assert a2.get_xscale() == "log"
    (zero,) = [ln for ln in a2.get_lines() if ln.get_linestyle() == ":"]
    np.testing.assert_array_equal(zero.get_ydata(), [0, 0])
    assert zero.get_color() == "grey"
    # one seed: nan half-widths drawn as no error bar at all
    line, _, (vertical,) = a2.containers[0].lines
    np.testing.assert_allclose(np.asarray(line.get_ydata(), float), [5.0, -2.0], atol=1e-12)
    for seg in vertical.get_segments():
        assert seg[0, 1] == pytest.approx(seg[1, 1])
    assert [c.lines[0].get_marker() for c in a1.containers] == ["o", "o"]


# -- without matplotlib ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, plot",
    [
        (alignment, "plot"),
        (bottleneck, "plot"),
        (distance, "plot"),
        (faithfulness, "plot"),
        (length, "plot"),
        (rope_scaling, "plot"),
        (vision, "_plot"),
    ],
)
def test_without_matplotlib_no_figure(module, plot, tmp_path, monkeypatch):
    monkeypatch.setattr(module, "pyplot_or_none", lambda: None)
    assert getattr(module, plot)({}, tmp_path / "x.png") is None
    assert list(tmp_path.iterdir()) == []
