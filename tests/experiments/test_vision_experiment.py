"""The vision experiment's report on given accuracies (no training): the Markdown table and the learning-curve
figure, against means and 95 % t-intervals worked by hand (3 seeds: t(0.975, 2) = 4.303)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlab.experiments.vision import VisionConfig, VisionResult, _plot

T2 = 4.303  # two-sided 95 % Student t quantile, 2 degrees of freedom

ACC = {"none": {100: [0.5, 0.6, 0.7], 200: [0.8, 0.8, 0.8]},
       "se": {100: [0.6, 0.6, 0.9], 200: [0.9, 0.8, 0.85]}}


def _result() -> VisionResult:
    cfg = VisionConfig(variants=("none", "se"), seeds=(0, 1, 2), train_sizes=(100, 200), out_dir=None)
    return VisionResult(cfg, ACC, params={"none": 1234, "se": 1250}, seconds={}, box_mass=[[0.3, 0.5]],
                        box_chance=[0.25])


def test_table_by_hand():
    # none, n=100: mean 0.6, sd 0.1 → ± 4.303 · 0.1 / √3 = 0.2484; se, n=100: mean 0.7, sd √0.03 → ± 0.4303
    # Δ n=100: [0.1, 0, 0.2] → +0.1 ± 0.2484; se, n=200: mean 0.85, sd 0.05 → ± 0.1242; Δ n=200: +0.05 ± 0.1242
    # CBAM block 1 (2 seeds, t = 12.706): mean 0.4, sd √0.02 → ± 12.706 · √0.02 / √2 = 1.2706
    assert _result().table() == "\n".join([
        "| gate | parameters | accuracy % (n=100) | Δ vs none (n=100) | accuracy % (n=200) | Δ vs none (n=200) |",
        "|---|---:|---:|---:|---:|---:|",
        "| none | 1,234 | 60.00 ± 24.84 | — | 80.00 ± 0.00 | — |",
        "| se | 1,250 | 70.00 ± 43.03 | +10.00 ± 24.84 | 85.00 ± 12.42 | +5.00 ± 12.42 |",
        "",
        "(mean ± 95 % t-interval over 3 seeds; Δ is paired by seed, in points)",
        "",
        "| CBAM spatial map | share of M_s mass inside the item's box (%) | uniform map (%) |",
        "|---|---:|---:|",
        "| block 1 | 40.00 ± 127.06 | 25.00 |",
    ])


def test_learning_curve_and_paired_difference_figure(tmp_path, monkeypatch):
    """Left: accuracy per gate with its interval as error bars; right: the paired difference to the plain CNN
    (the gates only), in points. Read back from the figure where it is closed."""
    plt = pytest.importorskip("matplotlib.pyplot")
    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    path = tmp_path / "curve.png"
    assert _plot(_result(), path) == path and path.stat().st_size > 1000
    (fig,) = closed
    a1, a2 = fig.axes
    hw = lambda v: T2 * np.std(v, ddof=1) / math.sqrt(3)  # noqa: E731
    want1 = {v: [(100 * np.mean(ACC[v][n]), 100 * hw(ACC[v][n])) for n in (100, 200)] for v in ("none", "se")}
    diff = {n: np.subtract(ACC["se"][n], ACC["none"][n]) for n in (100, 200)}
    want2 = {"se": [(100 * diff[n].mean(), 100 * hw(diff[n])) for n in (100, 200)]}
    try:
        for ax, want in ((a1, want1), (a2, want2)):
            assert [t.get_text() for t in ax.get_legend().get_texts()] == list(want)
            assert ax.get_xscale() == "log"
            for bars, points in zip(ax.containers, want.values()):
                line, _, (vertical,) = bars.lines
                np.testing.assert_array_equal(line.get_xdata(), [100, 200])
                np.testing.assert_allclose(np.asarray(line.get_ydata(), float), [m for m, _ in points], rtol=1e-12)
                ends = np.array([seg[:, 1] for seg in vertical.get_segments()])  # (sizes, [low, high])
                np.testing.assert_allclose(ends, [[m - h, m + h] for m, h in points], rtol=1e-9, atol=1e-9)
        assert a2.get_ylabel() == "Δ accuracy vs plain CNN (points)" and a1.get_ylabel() == "test accuracy (%)"
    finally:
        monkeypatch.undo()
        plt.close(fig)


@pytest.mark.parametrize("field, bad, says", [
    ("clutter", -1, "clutter must be >= 0; got -1"), ("epochs", 0, "epochs must be >= 1; got 0"),
    ("batch_size", 0, "batch_size must be >= 1; got 0"), ("n_test", 0, "n_test must be >= 1; got 0"),
])
def test_sizes_are_checked_and_no_clutter_is_allowed(field, bad, says):
    VisionConfig(clutter=0, out_dir=None).validate()  # a plain canvas, no distractors
    with pytest.raises(ValueError, match=f"^{says}$"):
        VisionConfig(**{field: bad}, out_dir=None).validate()
