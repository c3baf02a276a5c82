"""The distance experiment: what the distance between two related tokens does to RNNs and to attention.

Claim (the third tutorial's list of the RNN's problems; Bengio et al. 1994, "Learning long-term
dependencies with gradient descent is difficult"; Vaswani et al. 2017, §4): an RNN
carries information from token i to token j through j − i steps of its recurrence, so
gradients vanish over distance and long-range dependencies are lost; self-attention
relates any two positions in one step, regardless of distance.

The task: a sequence of ``k + prefix + 1`` tokens holds one *cue* (one of ``classes``
tokens) ``k`` positions before the final query token, the rest are distractors; the
answer is the cue's class. A GRU, an LSTM and a self-attention encoder of similar size
(``hidden`` units; one Transformer layer with sinusoidal positions) are trained with
the same steps, batches and learning rate for each distance k and several seeds.

Two measurements:

* **accuracy against k** on fresh test sequences (mean and a 95 % t-interval over seeds);
* **gradient against distance**: ‖∂ℓ/∂x_{T−d}‖, the norm of the gradient of the
  final logit of the true class with respect to the input embedding d positions before
  the end, for each model at initialisation (the architecture's own property) and
  after training at the largest k (mean over a batch and seeds).

``DistanceConfig.quick()`` is a seconds-long version for the tests.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from .._files import claim
from ..nn import SinusoidalPositionalEncoding, TransformerEncoderLayer
from ..train.classify import ClassifierTask, train_classifier
from ..viz.heatmap import pyplot_or_none
from ._outputs import save_figure, write_results

MODELS = ("gru", "lstm", "attention")
# two-sided 95 % Student t quantiles t(0.975, df) for df 1..30, as printed in the tables
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959963984540054


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "distance.png")


def t975(df: int) -> float:
    """t(0.975, df): the table up to 30 degrees of freedom, beyond it the Cornish-Fisher expansion around the
    normal quantile z (three terms in 1/df; within 1e-4 of the exact value for df > 30)."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


@dataclass
class DistanceConfig:
    distances: tuple[int, ...] = (4, 16, 64, 256)
    models: tuple[str, ...] = MODELS
    seeds: int = 3
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    hidden: int = 64  # RNN hidden units = the attention model's width
    classes: int = 4
    distractors: int = 16
    prefix: int = 4  # distractors before the cue
    test_size: int = 512

    @classmethod
    def quick(cls) -> DistanceConfig:
        return cls(distances=(2, 8), seeds=2, steps=20, batch_size=16, hidden=16, test_size=64)


def make_batch(cfg: DistanceConfig, k: int, size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """tokens (size, prefix + k + 1) and labels (size,): the cue sits k positions before the query.

    Ids: 0 the query token, 1..classes the cues, then the distractors."""
    n = cfg.prefix + k + 1
    x = 1 + cfg.classes + torch.randint(cfg.distractors, (size, n), generator=g)
    y = torch.randint(cfg.classes, (size,), generator=g)
    x[:, n - 1 - k] = 1 + y
    x[:, -1] = 0
    return x, y


class RNNClassifier(nn.Module):
    def __init__(self, cell: str, vocab: int, hidden: int, classes: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell](hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, e: torch.Tensor) -> torch.Tensor:  # embeddings (b, n, hidden) → logits (b, classes)
        return self.out(self.rnn(e)[0][:, -1])


class AttentionClassifier(nn.Module):
    def __init__(self, vocab: int, hidden: int, classes: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.pos = SinusoidalPositionalEncoding(hidden)
        self.layer = TransformerEncoderLayer(hidden, 4, ffn_dim=2 * hidden, dropout=0.0, norm_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(self.layer(self.pos(e)))[:, -1])


def build(name: str, cfg: DistanceConfig) -> nn.Module:
    vocab = 1 + cfg.classes + cfg.distractors
    if name == "attention":
        return AttentionClassifier(vocab, cfg.hidden, cfg.classes)
    return RNNClassifier(name, vocab, cfg.hidden, cfg.classes)


def gradient_by_distance(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """‖∂ logit_y / ∂ e_{T−d}‖ for d = 0 … T−1 (mean over the batch); (T,)."""
    e = model.emb(x).detach().requires_grad_()
    (grad,) = torch.autograd.grad(model(e).gather(1, y[:, None]).sum(), [e])  # not into the model's parameters
    return grad.norm(dim=-1).mean(0).flip(0)  # index d = distance from the last token


def _logits(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return net(net.emb(x))


def train_one(name: str, k: int, seed: int, cfg: DistanceConfig) -> tuple[nn.Module, float]:
    """Train one model with ``train.fit`` (Adam, the gradient's norm clipped at 1, batches from a generator
    seeded with ``seed``); returns (model, accuracy on the seeded test batch)."""
    torch.manual_seed(seed)
    model = build(name, cfg)
    g = torch.Generator().manual_seed(seed)

    def draw(step: int) -> tuple[tuple[torch.Tensor], torch.Tensor]:
        x, y = make_batch(cfg, k, cfg.batch_size, g)
        return (x,), y

    train_classifier(ClassifierTask(model, draw, steps=cfg.steps, lr=cfg.lr, logits=_logits, clip=1.0, desc="distance"))
    x, y = make_batch(cfg, k, cfg.test_size, torch.Generator().manual_seed(10_000 + seed))
    with torch.no_grad():
        acc = (model(model.emb(x)).argmax(-1) == y).float().mean().item()
    return model, acc


def interval(values: Iterable[float]) -> tuple[float, float]:
    """(mean, half-width of the 95 % t-interval) of a list or array; half-width nan for one value."""
    values = [float(v) for v in values]
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


def run(cfg: DistanceConfig, out_dir: str | Path | None = None, *, progress=None) -> dict:
    if out_dir is not None:
        claim(out_dir, FILES)  # before any work: a file of the user's there is refused
    t0 = time.perf_counter()
    acc: dict[str, dict[int, list[float]]] = {m: {k: [] for k in cfg.distances} for m in cfg.models}
    grads: dict[str, dict[str, list[list[float]]]] = {m: {"init": [], "trained": []} for m in cfg.models}
    k_max = max(cfg.distances)
    for seed in range(cfg.seeds):
        xg, yg = make_batch(cfg, k_max, 64, torch.Generator().manual_seed(20_000 + seed))
        for name in cfg.models:
            torch.manual_seed(seed)
            grads[name]["init"].append(gradient_by_distance(build(name, cfg), xg, yg).tolist())
            for k in cfg.distances:
                model, a = train_one(name, k, seed, cfg)
                acc[name][k].append(a)
                if progress:
                    progress(f"seed {seed} {name:9s} k={k:4d}: test accuracy {100 * a:.1f} %")
                if k == k_max:
                    grads[name]["trained"].append(gradient_by_distance(model, xg, yg).tolist())
    results = {
        "config": asdict(cfg),
        "accuracy": {m: {str(k): interval(v) for k, v in d.items()} for m, d in acc.items()},
        "accuracy_per_seed": {m: {str(k): v for k, v in d.items()} for m, d in acc.items()},
        "gradient_norm": {m: {when: [sum(c) / len(c) for c in zip(*runs)] for when, runs in d.items()}
                          for m, d in grads.items()},
        "seconds": time.perf_counter() - t0,
    }
    if out_dir is not None:
        out = write_results(out_dir, results, table(results), indent=1)
        plot(results, out / "distance.png")
    return results


def table(results: dict) -> str:
    cfg = results["config"]
    ks = cfg["distances"]
    lines = ["| model | " + " | ".join(f"k = {k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for m, d in results["accuracy"].items():
        cells = [f"{100 * mu:.1f} ± {100 * hw:.1f}" if hw == hw else f"{100 * mu:.1f}" for mu, hw in (d[str(k)] for k in ks)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("")
    k_max = max(ks)
    ds = [d for d in (1, 4, 16, 64, 256, 1024) if d < cfg["prefix"] + k_max + 1]
    lines += ["| ‖∂ logit / ∂ x_{T−d}‖ | " + " | ".join(f"d = {d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
    for m, d in results["gradient_norm"].items():
        for when, curve in d.items():
            lines.append(f"| {m} ({when}) | " + " | ".join(f"{curve[x]:.2e}" for x in ds) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path | None:
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    ks = results["config"]["distances"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for m, d in results["accuracy"].items():
        mu = [100 * d[str(k)][0] for k in ks]
        hw = [100 * d[str(k)][1] if d[str(k)][1] == d[str(k)][1] else 0 for k in ks]
        a1.errorbar(ks, mu, yerr=hw, marker="o", capsize=3, label=m)
    a1.axhline(100 / results["config"]["classes"], color="grey", ls=":", label="chance")
    a1.set(xscale="log", xlabel="distance k from the cue to the query", ylabel="test accuracy (%)",
           title="Accuracy against distance (95 % CI over seeds)")
    a1.legend()
    for m, d in results["gradient_norm"].items():
        for when, ls in (("init", "--"), ("trained", "-")):
            curve = d[when]
            a2.plot(range(1, len(curve)), curve[1:], ls, label=f"{m} ({when})")
    a2.set(xscale="log", yscale="log", xlabel="distance d from the last token",
           ylabel="‖∂ logit / ∂ x_{T−d}‖", title="Gradient reaching a token d steps back")
    a2.legend(fontsize=7)
    return save_figure(plt, fig, path)


__all__ = ["DistanceConfig", "run", "table", "make_batch", "gradient_by_distance", "interval"]
