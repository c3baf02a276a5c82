"""``attnlab plot-run DIR``: one panel for all the losses (in nats per token) and one per other number of
``metrics.jsonl`` (``step``, ``wall_s``, ``epoch`` and true/false flags are not drawn), each curve over the
steps where it was recorded, markers only for short curves, the panels sharing the step axis; the figure's
size, title and legend; ``curves.png`` by default; a missing folder, a run without metrics and an output that
is not a PNG each refused with one line."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

import attnlab.cli.plot_run as plot_run
from attnlab.cli import main

RECORDS = [
    {
        "step": 1,
        "train_loss": 3.0,
        "lr": 0.1,
        "wall_s": 0.5,
        "epoch": 0,
        "nonfinite": False,
        "note": "start",
    },
    {
        "step": 2,
        "train_loss": 2.0,
        "val_loss": 2.5,
        "val_bleu": 10,
        "lr": 0.05,
        "wall_s": 1.0,
        "epoch": 1,
    },
    {"step": 3, "train_loss": 1.5, "lr": None},
]


@pytest.fixture
def drawn(monkeypatch):
    figures = []

    def fake_save(fig, path):
        figures.append((fig, path))
        return path

    monkeypatch.setattr(plot_run, "save_figure", fake_save)
    yield figures
    for fig, _ in figures:
        plt.close(fig)


def _run(tmp_path, records, name="my-run"):
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    return run


def _lines(ax):
    return [
        (line.get_label(), list(line.get_xdata()), list(line.get_ydata()), line.get_marker())
        for line in ax.get_lines()
    ]


def test_the_panels_of_a_run(tmp_path, drawn, capsys):
    run = _run(tmp_path, RECORDS)
    out = tmp_path / "c.png"
    assert main(["plot-run", str(run), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    ((fig, path),) = drawn
    assert path == str(out)
    losses, lr, bleu = fig.axes
    assert tuple(fig.get_size_inches()) == pytest.approx((7, 2.6 * 3))
    assert fig._suptitle.get_text() == "my-run: 3 records"
    assert _lines(losses) == [
        ("train_loss", [1, 2, 3], [3.0, 2.0, 1.5], "o"),
        ("val_loss", [2], [2.5], "o"),
    ]
    assert _lines(lr) == [("lr", [1, 2], [0.1, 0.05], "o")]
    assert _lines(bleu) == [("val_bleu", [2], [10], "o")]
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (nats per token)", "lr", "val_bleu"]
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "", "step"]
    for ax in fig.axes:
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == [
            line.get_label() for line in ax.get_lines()
        ]
        assert legend.get_texts()[0].get_fontsize() == 8
        assert (
            ax.xaxis.get_gridlines()[0].get_visible()
            and ax.xaxis.get_gridlines()[0].get_alpha() == 0.3
        )
        assert ax.get_shared_x_axes().joined(ax, losses)


def test_a_single_loss_is_its_own_label_and_long_curves_have_no_markers(tmp_path, drawn):
    run = _run(tmp_path, [{"step": s, "val_loss": 1.0 / s} for s in range(1, 31)])
    assert main(["plot-run", str(run), "-o", str(tmp_path / "c.png")]) == 0
    ((fig, _),) = drawn
    (ax,) = fig.axes
    assert ax.get_ylabel() == "val_loss"
    assert _lines(ax)[0][3] == "None"
    assert tuple(fig.get_size_inches()) == pytest.approx((7, 2.6))


def test_twenty_nine_points_still_have_markers(tmp_path, drawn):
    run = _run(tmp_path, [{"step": s, "acc": s} for s in range(29)])
    assert main(["plot-run", str(run), "-o", str(tmp_path / "c.png")]) == 0
    assert _lines(drawn[0][0].axes[0])[0][3] == "o"


def test_a_run_without_losses_has_no_loss_panel(tmp_path, drawn):
    run = _run(tmp_path, [{"step": 1, "acc": 0.5, "bleu": 3}, {"step": 2, "acc": 0.7, "bleu": 4}])
    assert main(["plot-run", str(run), "-o", str(tmp_path / "c.png")]) == 0
    assert [ax.get_ylabel() for ax in drawn[0][0].axes] == ["acc", "bleu"]


def test_the_default_output_is_curves_png(tmp_path, drawn, monkeypatch, capsys):
    run = _run(tmp_path, RECORDS)
    monkeypatch.chdir(tmp_path)
    assert main(["plot-run", str(run)]) == 0
    assert drawn[0][1] == "curves.png" and capsys.readouterr().out == "wrote curves.png\n"


def test_a_real_picture_is_written(tmp_path):
    run = _run(tmp_path, RECORDS)
    assert main(["plot-run", str(run), "-o", str(tmp_path / "real.png")]) == 0
    assert (
        plt.imread(tmp_path / "real.png").shape[1] == 7 * 120
    )  # 7 inches wide at the library's 120 dpi


def test_refusals(tmp_path, capsys):
    assert main(["plot-run", str(tmp_path / "none")]) == 2
    assert (
        capsys.readouterr().err
        == f"attnlab plot-run: error: no run folder at {tmp_path / 'none'}\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["plot-run", str(empty)]) == 2
    assert capsys.readouterr().err == (
        f"attnlab plot-run: error: {empty} has no metrics.jsonl "
        "(runs written before attnlab logged metrics have none)\n"
    )
    run = _run(tmp_path, RECORDS)
    assert main(["plot-run", str(run), "-o", "c.svg"]) == 2
    assert (
        capsys.readouterr().err
        == "attnlab plot-run: error: --out must be a .png file; got 'c.svg'\n"
    )
    assert not (tmp_path / "c.svg").exists()
