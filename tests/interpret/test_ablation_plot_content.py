"""What the head-ablation picture shows: the losses it was given, the full model's loss as a reference
line and in the legend, how many heads there were, the title, and which head each step removes.

The figure is taken where ``plot_ablation`` hands it to the writer, and its artists are read back."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

import attnlab.interpret.heads as heads_module
from attnlab.interpret import plot_ablation

matplotlib.use("Agg")

LOSSES = [2.34567, 2.4, 2.9, 3.5, 4.25]  # the full model, then 1..4 heads removed


@pytest.fixture
def drawn(monkeypatch):
    """Call plot_ablation and return (figure, path) as it reached the writer; nothing is written."""
    got = []
    monkeypatch.setattr(heads_module, "save_figure", lambda fig, path: got.append((fig, path)))

    def draw(*args, **kwargs):
        before = len(got)
        plot_ablation(*args, **kwargs)
        assert len(got) == before + 1  # written once
        return got[-1]

    yield draw
    for fig, _ in got:
        plt.close(fig)


def test_the_curve_and_the_reference_line(drawn):
    fig, path = drawn(LOSSES, "a.png")
    assert path == "a.png"
    ax = fig.axes[0]
    curve, reference = ax.lines
    np.testing.assert_array_equal(curve.get_xdata(), [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(curve.get_ydata(), LOSSES)
    np.testing.assert_array_equal(reference.get_ydata(), [2.34567, 2.34567])  # level with the full model
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["all heads: 2.346"]


def test_the_axes_say_what_is_drawn(drawn):
    fig, _ = drawn(LOSSES, "a.png")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "heads removed, least important first (of 4)"
    assert ax.get_ylabel() == "loss (mean cross-entropy, nats)"
    assert ax.get_title() == "head ablation (Michel et al. 2019)"
    fig, _ = drawn(LOSSES, "a.png", title="my model")
    assert fig.axes[0].get_title() == "my model"


def test_the_removed_heads_label_the_top_axis(drawn):
    labels = ["0.1", "1.0", "0.0", "1.1"]  # (module, head) removed at steps 1..4
    fig, _ = drawn(LOSSES, "a.png", labels=labels)
    (top,) = fig.axes[0].child_axes
    np.testing.assert_array_equal(top.get_xticks(), [1, 2, 3, 4])
    assert [t.get_text() for t in top.get_xticklabels()] == labels
    fig, _ = drawn(LOSSES, "a.png")
    assert not fig.axes[0].child_axes  # no labels, no top axis


def test_too_many_labels_to_read_leave_the_top_axis_off(drawn):
    losses = [1.0] * 50
    fig, _ = drawn(losses, "a.png", labels=[str(i) for i in range(48)])
    assert len(fig.axes[0].child_axes) == 1
    fig, _ = drawn(losses, "a.png", labels=[str(i) for i in range(49)])
    assert not fig.axes[0].child_axes
