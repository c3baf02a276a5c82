"""The RoPE-scaling experiment: validation loss beyond the trained context, by position method.

Claim (Chen et al. 2023, https://arxiv.org/abs/2306.15595; Peng et al. 2023, YaRN,
https://arxiv.org/abs/2309.00071; Press et al. 2021, ALiBi, https://arxiv.org/abs/2108.12409):
a model trained with rotary positions at L tokens degrades sharply beyond L; rescaling the
rotary frequencies at inference (linear interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3's
band, LongRoPE's per-frequency factors) keeps the
loss lower without retraining; ALiBi extrapolates by construction.

Method: the character GPT (``attnlab.models.gpt``) is trained twice on Shakespeare
(``attnlab.data.shakespeare``) with ``block_size = L`` (128 by default), once with rotary
positions and once with ALiBi, same seed, steps and batches. The rotary model is then
evaluated with its rotary modules swapped for ``RotaryEmbedding(d_h, scaling=...)`` of each
method (no retraining, factor s = ``factor``, original context L). Validation loss (next
character cross-entropy, mean over all positions of each window) on the same held-out text
cut into windows of n = 128 … 1,024 tokens, ``eval_tokens`` tokens per length.

``RopeScalingConfig.quick()`` is a seconds-long version for the tests.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from .._files import claim
from ..data.vocab import Vocab
from ..models.gpt import GPT
from ..nn.positional import RotaryEmbedding
from ..train.lm import LMTrainConfig, split, train_lm
from ..viz.heatmap import pyplot_or_none
from ..viz.heatmap import save as save_figure
from ._outputs import write_results

METHODS = ("rope", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope", "alibi")


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "rope_scaling.png")


@dataclass
class RopeScalingConfig:
    block_size: int = 128  # the trained context L
    lengths: tuple[int, ...] = (128, 256, 512, 1024)  # evaluation lengths n
    factor: float = 8.0  # s for every scaling method (1,024 / 128)
    steps: int = 500
    batch_size: int = 32
    dim: int = 128
    num_layers: int = 4
    num_heads: int = 4
    lr: float = 3e-3
    plays: int | None = 8  # Shakespeare plays used (None: all)
    eval_tokens: int = 16384  # per length
    eval_batch: int = 8  # windows per forward pass
    methods: tuple[str, ...] = METHODS
    seed: int = 0

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods must be names from {METHODS}; got {self.methods}")
        if not self.lengths or min(self.lengths) < 2 or self.factor < 1:
            raise ValueError(f"lengths must be >= 2 and factor >= 1; got {self.lengths}, {self.factor}")

    @classmethod
    def quick(cls, **kw) -> RopeScalingConfig:
        base = dict(block_size=16, lengths=(16, 32, 64), factor=4.0, steps=8, batch_size=8, dim=32,
                    num_layers=1, num_heads=2, plays=1, eval_tokens=512, eval_batch=8)
        return replace(cls(), **{**base, **kw})


def _scaling(method: str, cfg: RopeScalingConfig, head_dim: int) -> dict | None:
    """The ``RotaryEmbedding`` scaling of a method. llama3 takes Llama 3's band (low 1, high 4).
    LongRoPE searches its per-frequency factors; no search runs here: within L every frequency
    is kept (short factors 1), beyond L the factors ramp from 1 (the fastest frequency) to s (the
    slowest), a hand-set stand-in for a searched set."""
    if method == "rope":
        return None
    sc = {"type": method, "factor": cfg.factor, "original_max_position": cfg.block_size}
    if method == "longrope":
        half = head_dim // 2
        sc["short_factor"] = [1.0] * half
        sc["long_factor"] = [1.0 + (cfg.factor - 1.0) * i / max(1, half - 1) for i in range(half)]
    return sc


def _set_rotary(model: GPT, method: str | None, cfg: RopeScalingConfig | None = None) -> None:
    for block in model.blocks:
        attn = block.self_attn
        scaling = None if method is None or cfg is None else _scaling(method, cfg, attn.head_dim)
        attn.rotary = RotaryEmbedding(attn.head_dim, base=attn.rotary.base, scaling=scaling)


@torch.no_grad()
def _val_loss(model: GPT, ids: torch.Tensor, n: int, cfg: RopeScalingConfig) -> tuple[float, int]:
    """Mean next-token loss over consecutive windows of n + 1 tokens of ``ids`` (the same text for every method)."""
    count = min(max(1, cfg.eval_tokens // n), (len(ids) - 1) // n)
    if count < 1:
        raise ValueError(f"the validation text ({len(ids)} tokens) is shorter than one window of {n + 1}")
    windows = torch.stack([ids[i * n : i * n + n + 1] for i in range(count)])  # (count, n + 1)
    model.eval()
    total = 0.0
    for s in range(0, count, cfg.eval_batch):
        w = windows[s : s + cfg.eval_batch]
        logits = model(w[:, :-1])  # (b, n, vocab)
        total += float(F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten(), reduction="sum"))
    return total / (count * n), count


def run(cfg: RopeScalingConfig, out: str | Path | None = None, *, text: str | None = None, progress: bool = False) -> dict:
    """Train the rotary and ALiBi models, evaluate every method at every length; write
    table.md, results.json and rope_scaling.png to ``out`` when given."""
    if out is not None:
        claim(out, FILES)  # before any work: a file of the user's there is refused
    if text is None:
        from ..data import shakespeare

        text = shakespeare.load_text(plays=cfg.plays)
    log = print if progress else None
    vocab = Vocab.chars(text)
    ids = vocab.encode_tensor(text)
    _, val_ids = split(ids, 0.1, cfg.block_size)
    if len(val_ids) < max(cfg.lengths) + 1:
        raise ValueError(f"the validation text ({len(val_ids)} characters) is shorter than the longest length {max(cfg.lengths)} + 1")
    train_cfg = LMTrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, block_size=cfg.block_size, dim=cfg.dim,
                              num_layers=cfg.num_layers, num_heads=cfg.num_heads, lr=cfg.lr, eval_every=0,
                              eval_batches=2, seed=cfg.seed, warmup=max(1, min(20, cfg.steps // 10)))
    results: dict = {"config": json.loads(json.dumps(asdict(cfg))), "methods": {}, "train": {}}
    models: dict[str, GPT] = {}
    for positional in sorted({"alibi" if m == "alibi" else "rope" for m in cfg.methods}):
        t0 = time.perf_counter()
        model, _, r = train_lm(text, replace(train_cfg, positional=positional), log=log)
        models[positional] = model
        results["train"][positional] = {"val_loss": r.val_loss, "seconds": round(time.perf_counter() - t0, 1), "steps": r.steps}
    for method in cfg.methods:
        model = models["alibi" if method == "alibi" else "rope"]
        if method != "alibi":
            _set_rotary(model, method, cfg)
        row = {}
        for n in cfg.lengths:
            loss, count = _val_loss(model, val_ids, n, cfg)
            row[str(n)] = round(loss, 4)
            if log:
                log(f"{method:>8}  n={n:>5}  val loss {loss:.4f}  ({count} windows)")
        results["methods"][method] = row
    if out is not None:
        out = write_results(out, results, table(results))
        plot(results, out / "rope_scaling.png")
    return results


def table(results: dict) -> str:
    """Markdown: one row per method, validation loss (nats per character) per evaluation length."""
    cfg = results["config"]
    lengths = [str(n) for n in cfg["lengths"]]
    head = f"| method (trained at L = {cfg['block_size']}, s = {cfg['factor']:g}) | "
    lines = [head + " | ".join(f"n = {n}" for n in lengths) + " |",
             "|---|" + "---:|" * len(lengths)]
    for method, row in results["methods"].items():
        lines.append(f"| {method} | " + " | ".join(f"{row[n]:.3f}" for n in lengths) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path | None:
    """Validation loss against evaluation length, one line per method (None without matplotlib)."""
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    cfg = results["config"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for method, row in results["methods"].items():
        ax.plot(cfg["lengths"], [row[str(n)] for n in cfg["lengths"]], marker="o", label=method)
    ax.axvline(cfg["block_size"], color="grey", linestyle=":", label="trained length")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length n (characters)")
    ax.set_ylabel("validation loss (nats / char)")
    ax.set_title(f"Beyond the trained context (s = {cfg['factor']:g})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)  # written whole, then renamed


__all__ = ["RopeScalingConfig", "run", "table", "plot", "METHODS"]
