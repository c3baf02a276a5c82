"""The length experiment: translation quality against sentence length on real sentences.

Claim (the source tutorials; Bahdanau et al. 2015, Fig. 2, https://arxiv.org/abs/1409.0473): without
attention an encoder–decoder's quality falls as sentences grow; with attention it holds.

The bottleneck experiment (``experiments/bottleneck.py``) tests this on numbers written in
words. Here the same three models (``attnlab.models.Seq2Seq`` with the ``none``, ``bahdanau``
and ``luong`` decoders: same size, steps, batches and seed) are trained on the ``ding-de-en``
sentence pairs of Debian's trans-de-en dictionary (German → English, word level), and the
greedy translations of the test split are scored with BLEU and chrF (sacrebleu) per
source-length bucket, each with a 95 % bootstrap interval over the bucket's sentences
(Koehn 2004: resample the sentences with replacement, recompute the corpus score, take the
2.5 and 97.5 percentiles). The plot is in the style of Bahdanau et al.'s Fig. 2.

``LengthConfig.quick()`` is a seconds-long smoke run.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path

from .._files import claim
from ..train import metrics
from ..viz.heatmap import pyplot_or_none
from ._outputs import save_figure, write_results
from .bottleneck import BottleneckConfig
from .bottleneck import run as run_models

# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "length.png")


@dataclass
class LengthConfig:
    data: str = "ding-de-en"
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    emb_dim: int = 64
    hidden: int = 128
    attn_dim: int = 128
    buckets: int = 4
    test_size: int = 939  # the whole test split
    resamples: int = 200
    decoders: tuple[str, ...] = ("none", "bahdanau", "luong")
    seed: int = 0

    @classmethod
    def quick(cls, **kw) -> LengthConfig:
        return cls(**{**dict(steps=15, batch_size=16, emb_dim=16, hidden=24, attn_dim=24, buckets=2, test_size=40,
                             resamples=20), **kw})


def bootstrap(hyps: list[str], refs: list[str], resamples: int, seed: int) -> dict[str, tuple[float, float]]:
    """95 % percentile intervals of corpus BLEU and chrF over sentences resampled with replacement."""
    rng = random.Random(seed)
    n = len(refs)
    draws: dict[str, list[float]] = {"bleu": [], "chrf": []}
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        s = metrics.scores([hyps[i] for i in idx], [refs[i] for i in idx])
        draws["bleu"].append(s["bleu"]), draws["chrf"].append(s["chrf"])
    out = {}
    for k, v in draws.items():
        v.sort()
        out[k] = (v[int(0.025 * (len(v) - 1))], v[int(round(0.975 * (len(v) - 1)))])
    return out


def run(cfg: LengthConfig, out: str | Path | None = None, *, progress: bool = False) -> dict:
    if out is not None:
        claim(out, FILES)  # before any work: a file of the user's there is refused
    bcfg = BottleneckConfig(data=cfg.data, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, emb_dim=cfg.emb_dim,
                            hidden=cfg.hidden, attn_dim=cfg.attn_dim, buckets=cfg.buckets, test_size=cfg.test_size,
                            seed=cfg.seed, decoders=cfg.decoders)
    raw = run_models(bcfg, None, progress=progress, keep_outputs=True)
    results = {"config": asdict(cfg), "buckets": raw["buckets"], "models": {}}
    for dec, r in raw["models"].items():
        o = r["outputs"]
        rows = []
        for i, (lo, hi) in enumerate(raw["buckets"]):
            sel = [j for j, n in enumerate(o["lengths"]) if lo <= n <= hi]
            hyps, refs = [o["hyps"][j] for j in sel], [o["refs"][j] for j in sel]
            ci = bootstrap(hyps, refs, cfg.resamples, cfg.seed + i) if sel else {"bleu": (0.0, 0.0), "chrf": (0.0, 0.0)}
            rows.append({**r["by_length"][i], "bleu_ci": ci["bleu"], "chrf_ci": ci["chrf"]})
        results["models"][dec] = {"overall": r["overall"], "by_length": rows, "seconds": r["seconds"],
                                  "tokens_per_s": r["tokens_per_s"], "parameters": r["parameters"],
                                  "train_loss": r["train_loss"]}
    if out is not None:
        out = write_results(out, results, table(results))
        plot(results, out / "length.png")
    return results


def table(results: dict) -> str:
    decs = list(results["models"])
    lines = ["| source words | n | " + " | ".join(f"{d} BLEU [95 % CI] | {d} chrF [95 % CI]" for d in decs) + " |",
             "|---|---:|" + "---:|---:|" * len(decs)]
    for i, (lo, hi) in enumerate(results["buckets"]):
        n = results["models"][decs[0]]["by_length"][i]["n"]
        cells = []
        for d in decs:
            row = results["models"][d]["by_length"][i]
            cells += [f"{row['bleu']:.1f} [{row['bleu_ci'][0]:.1f}, {row['bleu_ci'][1]:.1f}]",
                      f"{row['chrf']:.1f} [{row['chrf_ci'][0]:.1f}, {row['chrf_ci'][1]:.1f}]"]
        lines.append(f"| {lo}–{hi} | {n} | " + " | ".join(cells) + " |")
    cells = []
    for d in decs:
        o = results["models"][d]["overall"]
        cells += [f"{o['bleu']:.1f}", f"{o['chrf']:.1f}"]
    lines.append(f"| all | {results['models'][decs[0]]['overall']['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path | None:
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    mids = [(lo + hi) / 2 for lo, hi in results["buckets"]]
    for ax, key, name in ((axes[0], "bleu", "BLEU"), (axes[1], "chrf", "chrF")):
        for dec, r in results["models"].items():
            ys = [row[key] for row in r["by_length"]]
            lo = [row[f"{key}_ci"][0] for row in r["by_length"]]
            hi = [row[f"{key}_ci"][1] for row in r["by_length"]]
            ax.plot(mids, ys, marker="o", label=dec)
            ax.fill_between(mids, lo, hi, alpha=0.2)
        ax.set(xlabel=f"source sentence length (words), {results['config']['data']}", ylabel=f"{name} (test)",
               title=f"{name} against length (95 % bootstrap band)")
        ax.legend()
    return save_figure(plt, fig, path)


__all__ = ["LengthConfig", "run", "table", "plot", "bootstrap"]
