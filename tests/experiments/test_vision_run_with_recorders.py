"""The vision experiment's run with its data, training and maps replaced by recorders: the test canvases are
drawn once (seed 10 000) from the held-out items, each seed and training size gets its own canvases (drawn
with that seed) shared by every gate, every run is logged, CBAM's spatial-map shares are read at the largest
training size only and the first CBAM model draws the overlays; the files written and their contents. And
``spatial_overlays``: the canvases, each block's map per row, the column and row titles."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnlab.experiments.vision as vision
import attnlab.viz.overlays as overlays
from attnlab.data import canvas
from attnlab.experiments.vision import VisionConfig

pytestmark = pytest.mark.usefixtures("one_thread")

RNG = np.random.default_rng(5)
TR = (RNG.integers(0, 256, (6, 28, 28)).astype(np.uint8), np.arange(6) % 10)
_CLUTTERED = canvas.cluttered  # the real one, kept before the runs replace it
TE = (RNG.integers(0, 256, (3, 28, 28)).astype(np.uint8), np.array([7, 8, 9]))


def _norm(images):
    """Pixels in [0, 1], then MNIST's mean and standard deviation, in float64."""
    return (images.astype(np.float64) / 255.0 - 0.1307) / 0.3081


class _Stub(torch.nn.Module):
    def __init__(self, n_params, tag):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n_params))
        self.tag = tag


def _install(monkeypatch, plot_returns="plot"):
    rec = SimpleNamespace(
        datasets=[],
        cluttered=[],
        trained=[],
        maps=[],
        mass=[],
        share=[],
        overlays=[],
        plots=[],
        logs=[],
    )
    monkeypatch.setitem(
        vision.DATASETS, "mnist5k", lambda cfg: rec.datasets.append(cfg) or (TR, TE)
    )
    real_cluttered = canvas.cluttered

    def cluttered(items, labels, **kw):
        rec.cluttered.append(
            (items is TR[0] and labels is TR[1], items is TE[0] and labels is TE[1], kw)
        )
        return real_cluttered(items, labels, **kw)

    monkeypatch.setattr(canvas, "cluttered", cluttered)
    sizes = {"none": 3, "se": 5, "cbam": 11}

    def train_one(cfg, v, seed, train, test):
        k = len(rec.trained)
        rec.trained.append((cfg, v, seed, train, test))
        return _Stub(sizes[v], (v, seed, len(train[1]))), 0.2 + 0.04 * k, 1.0 + k

    monkeypatch.setattr(vision, "train_one", train_one)

    def spatial_maps(model, x):
        rec.maps.append((model.tag, x))
        return [np.ones((len(x), 6, 4)), np.ones((len(x), 3, 2))]

    monkeypatch.setattr(vision, "spatial_maps", spatial_maps)

    def mass_in_box(maps, boxes, size):
        rec.mass.append((maps.shape, boxes, size))
        return np.array([0.1, 0.3, 0.8]) * len(rec.mass)  # means 0.4, 0.8, 1.2, 1.6 in call order

    def box_share(boxes, size, h):
        rec.share.append((boxes, size, h))
        return np.array([h / 10.0, h / 20.0])  # mean 0.75 h / 10

    monkeypatch.setattr(canvas, "mass_in_box", mass_in_box)
    monkeypatch.setattr(canvas, "box_share", box_share)

    def spatial_overlays(model, images, labels, path):
        rec.overlays.append((model.tag, images, labels, path))
        return path

    monkeypatch.setattr(vision, "spatial_overlays", spatial_overlays)

    def plot(result, path):
        rec.plots.append(path)
        return path if plot_returns == "plot" else None

    monkeypatch.setattr(vision, "_plot", plot)
    return rec


def test_run_draws_trains_logs_measures_and_writes(tmp_path, monkeypatch):
    rec = _install(monkeypatch)
    out = tmp_path / "runs" / "vis"  # made by the run, parents too
    cfg = VisionConfig(
        variants=("none", "cbam", "se"),
        seeds=(3, 1),
        train_sizes=(5, 7, 4),
        epochs=2,
        n_test=3,
        canvas=30,
        clutter=2,
        n_overlays=2,
        out_dir=str(out),
    )
    res = vision.run(cfg, log=rec.logs.append)
    assert rec.datasets == [cfg]

    # the test canvases first, from the held-out items, then one set per (seed, size) from the training items
    test_kw = dict(n=3, size=30, clutter=2, seed=10_000)
    assert rec.cluttered[0] == (False, True, test_kw)
    assert rec.cluttered[1:] == [
        (True, False, dict(n=n, size=30, clutter=2, seed=s)) for s in (3, 1) for n in (5, 7, 4)
    ]
    t_img, t_y, t_box = _CLUTTERED(*TE, **test_kw)

    # every gate of a seed and size trains on the same normalised canvases, and all on the same test tensors
    runs = [(s, n, v) for s in (3, 1) for n in (5, 7, 4) for v in ("none", "cbam", "se")]
    assert [(seed, v) for _, v, seed, _, _ in rec.trained] == [(s, v) for s, _, v in runs]
    for (c, _, _, (x, y), (tx, ty)), (s, n, _) in zip(rec.trained, runs):
        assert c is cfg
        img, lab, _ = _CLUTTERED(*TR, n=n, size=30, clutter=2, seed=s)
        np.testing.assert_allclose(x.numpy()[:, 0], _norm(img), rtol=1e-6, atol=1e-6)
        assert y.tolist() == lab.tolist()
        np.testing.assert_allclose(tx.numpy()[:, 0], _norm(t_img), rtol=1e-6, atol=1e-6)
        assert ty.tolist() == t_y.tolist()

    # accuracies and seconds per gate in run order; parameters of the (last) model of each gate
    acc = {
        v: {
            n: [0.2 + 0.04 * k for k, r in enumerate(runs) if r[2] == v and r[1] == n]
            for n in (5, 7, 4)
        }
        for v in ("none", "cbam", "se")
    }
    assert res.accuracy == acc
    assert res.seconds == {
        v: [1.0 + k for k, r in enumerate(runs) if r[2] == v] for v in ("none", "cbam", "se")
    }
    assert res.params == {"none": 3, "cbam": 11, "se": 5}

    assert rec.logs[0] == (
        "vision: mnist5k items on 30×30 canvases with 2 fragments; train sizes 5, 7, 4, "
        "3 test canvases; 3 gates × 2 seeds × 2 epochs"
    )
    assert rec.logs[1:4] == [
        "  seed 3 n=5     none  test accuracy 20.00% (1.0 s)",
        "  seed 3 n=5     cbam  test accuracy 24.00% (2.0 s)",
        "  seed 3 n=5     se    test accuracy 28.00% (3.0 s)",
    ]
    assert rec.logs[-1] == "  seed 1 n=4     se    test accuracy 88.00% (18.0 s)"
    assert len(rec.logs) == 1 + len(runs)

    # CBAM's maps: on the test canvases, at the largest size (7) of each seed; then one canvas for the chance level
    assert [tag for tag, _ in rec.maps] == [("cbam", 3, 7), ("cbam", 1, 7), ("cbam", 3, 7)]
    for _, x in rec.maps[:2]:
        np.testing.assert_allclose(x.numpy()[:, 0], _norm(t_img), rtol=1e-6, atol=1e-6)
    assert rec.maps[2][1].shape == (1, 1, 30, 30)
    assert [(shape, size) for shape, _, size in rec.mass] == [((3, 6, 4), 30), ((3, 3, 2), 30)] * 2
    for _, boxes, _ in rec.mass:
        np.testing.assert_array_equal(boxes, t_box)
    assert res.box_mass == [
        pytest.approx([0.4, 1.2]),
        pytest.approx([0.8, 1.6]),
    ]  # block → one share per seed
    assert [(size, h) for _, size, h in rec.share] == [(30, 4), (30, 2)]  # each map's width
    np.testing.assert_array_equal(rec.share[0][0], t_box)
    assert res.box_chance == pytest.approx([0.3, 0.15])

    # the files: table, JSON, the learning curve, the first CBAM model's maps over the first two test canvases
    assert res.files == [
        out / "results.md",
        out / "results.json",
        out / "learning_curve.png",
        out / "cbam_spatial_maps.png",
    ]
    assert rec.plots == [out / "learning_curve.png"]
    ((tag, images, labels, path),) = rec.overlays
    assert tag == ("cbam", 3, 7) and path == out / "cbam_spatial_maps.png"
    np.testing.assert_array_equal(images, t_img[:2])
    assert labels.tolist() == t_y[:2].tolist()
    assert (out / "results.md").read_text(encoding="utf-8") == res.table() + "\n"
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["config"]["variants"] == ["none", "cbam", "se"] and data["config"]["seeds"] == [
        3,
        1,
    ]
    assert data["config"]["train_sizes"] == [5, 7, 4] and data["config"]["widths"] == [16, 32, 48]
    assert data["config"]["canvas"] == 30 and data["config"]["out_dir"] == str(out)
    assert data["accuracy"] == {v: {str(n): a for n, a in d.items()} for v, d in acc.items()}
    assert data["params"] == {"none": 3, "cbam": 11, "se": 5} and data["seconds"] == res.seconds
    np.testing.assert_allclose(data["cbam_box_mass"], [[0.4, 1.2], [0.8, 1.6]])
    assert data["uniform_box_mass"] == pytest.approx([0.3, 0.15])
    assert set(data) == {
        "config",
        "accuracy",
        "params",
        "seconds",
        "cbam_box_mass",
        "uniform_box_mass",
    }


@pytest.mark.parametrize("n_overlays, drawn", [(0, 0), (1, 1)])
def test_overlays_only_when_asked_and_no_plot_without_matplotlib(
    tmp_path, monkeypatch, n_overlays, drawn
):
    rec = _install(monkeypatch, plot_returns=None)
    cfg = VisionConfig(
        variants=("cbam",),
        seeds=(0,),
        train_sizes=(4,),
        n_test=3,
        canvas=28,
        clutter=0,
        n_overlays=n_overlays,
        out_dir=str(tmp_path),
    )
    res = vision.run(cfg, log=rec.logs.append)
    assert [len(images) for _, images, _, _ in rec.overlays] == [1] * drawn
    want = [tmp_path / "results.md", tmp_path / "results.json"] + [
        tmp_path / "cbam_spatial_maps.png"
    ] * drawn
    assert res.files == want  # the plot returned None: not listed


def test_without_cbam_no_map_is_read_and_without_a_folder_nothing_is_written(tmp_path, monkeypatch):
    rec = _install(monkeypatch)
    monkeypatch.chdir(tmp_path)
    cfg = VisionConfig(
        variants=("none", "se"),
        seeds=(0,),
        train_sizes=(4,),
        n_test=3,
        canvas=28,
        clutter=1,
        out_dir=None,
    )
    res = vision.run(cfg, log=rec.logs.append)
    assert rec.maps == [] and rec.mass == [] and rec.share == []
    assert res.box_mass == [] and res.box_chance == [] and res.files == []
    assert rec.overlays == [] and rec.plots == [] and list(tmp_path.iterdir()) == []


# -- spatial_overlays --------------------------------------------------------------------------------------


class _MapsModel(torch.nn.Module):
    """Logits that put class ``pred[i]`` first for item i; two blocks' spatial maps of shapes 4×5 and 2×3,
    each item's maps filled with its index (so the rows can be told apart)."""

    pred = [2, 0, 9]

    def forward(self, x, need_weights=False):
        n = x.shape[0]
        logits = torch.zeros(n, 10)
        logits[torch.arange(n), torch.tensor(self.pred[:n])] = 1.0
        if not need_weights:
            return logits
        idx = torch.arange(n, dtype=torch.float32)[:, None, None, None]
        maps = [
            SimpleNamespace(spatial=idx.expand(n, 1, 4, 5).clone()),
            SimpleNamespace(spatial=(idx + 0.5).expand(n, 1, 2, 3).clone()),
        ]
        return logits, maps


def test_spatial_overlays_rows_maps_and_titles(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(overlays, "save_overlay_grid", lambda *a, **k: calls.append((a, k)) or a[2])
    images = np.stack([np.full((28, 28), 10 * i, np.uint8) for i in range(3)])
    model = _MapsModel()
    path = vision.spatial_overlays(model, images, np.array([7, 1, 3]), tmp_path / "m.png")
    assert path == tmp_path / "m.png"
    (((imgs, per_row, p), kw),) = calls
    assert p == tmp_path / "m.png"
    assert len(imgs) == 3 and all(np.array_equal(a, b) for a, b in zip(imgs, images))
    assert [[m.shape for m in row] for row in per_row] == [[(4, 5), (2, 3)]] * 3
    for i, (m1, m2) in enumerate(per_row):
        assert (m1 == i).all() and (m2 == i + 0.5).all()
    assert kw == {
        "column_titles": ["canvas", "M_s block 1 (4×5)", "M_s block 2 (2×3)"],
        "row_titles": ["label 7, pred 2", "label 1, pred 0", "label 3, pred 9"],
    }
    assert model.training is False  # the maps are read in eval mode
