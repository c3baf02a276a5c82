"""The bottleneck experiment: quality against source length, with and without attention.

Claim (the first tutorial; Bahdanau et al. 2015, Fig. 2, https://arxiv.org/abs/1409.0473):
an encoder–decoder that squeezes the sentence into one fixed vector loses
quality as sentences grow; attention, which recomputes the context at every
step, holds it. The experiment trains the ``none``, ``bahdanau`` and ``luong``
decoders of ``attnlab.models.Seq2Seq`` with the same size, steps, batches and
seed on the same data, decodes the test split greedily and reports exact match
and chrF per source-length bucket, as a Markdown table and a PNG plot.

``decoders`` may also name ``"transformer"`` (``attnlab.models.TransformerTranslator``,
``tf_*`` sizes): it trains on the same data, split, batches, steps and seed, so
the table puts the Transformer beside the RNNs under the same budget (its own
learning rate ``tf_lr``: Adam without warm-up needs a smaller one).

``BottleneckConfig.quick()`` is a seconds-long version for the tests.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from .._files import claim
from ..data import build_corpus, load_dataset, source_batch
from ..data.batching import batches_in_order
from ..models import Seq2Seq, Seq2SeqConfig, TransformerConfig, TransformerTranslator
from ..train import metrics
from ..train.decode import greedy, length_guard
from ..train.loop import TrainConfig, train
from ..viz.heatmap import pyplot_or_none
from ._outputs import save_figure, write_results

DECODERS = ("none", "bahdanau", "luong")
MODEL_NAMES = (*DECODERS, "transformer")  # what ``decoders`` may hold


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "bottleneck.png")


@dataclass
class BottleneckConfig:
    data: str = "numbers-en-zh"
    n: int = 12000  # numbers in all splits
    max_digits: int = 12
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    emb_dim: int = 48
    hidden: int = 96
    attn_dim: int = 96
    buckets: int = 4
    test_size: int = 400
    seed: int = 0
    decoders: tuple[str, ...] = DECODERS  # any of MODEL_NAMES
    tf_dim: int = 96  # the Transformer ("transformer" in decoders)
    tf_heads: int = 4
    tf_layers: int = 2  # encoder and decoder layers each
    tf_ff: int = 192
    tf_dropout: float = 0.0
    tf_lr: float = 2e-3

    def __post_init__(self):
        self.decoders = tuple(self.decoders)
        bad = [d for d in self.decoders if d not in MODEL_NAMES]
        if bad or not self.decoders:
            raise ValueError(f"models must be a non-empty selection of {', '.join(MODEL_NAMES)}; got {', '.join(self.decoders) or 'none'}")

    @classmethod
    def quick(cls, **kw) -> BottleneckConfig:
        small = dict(n=600, max_digits=6, steps=30, batch_size=32, emb_dim=16, hidden=24, attn_dim=24, buckets=3,
                     test_size=40, tf_dim=24, tf_heads=2, tf_layers=1, tf_ff=48)
        return cls(**{**small, **kw})


def _build(name: str, cfg: BottleneckConfig, src_vocab: int, tgt_vocab: int):
    torch.manual_seed(cfg.seed)
    if name == "transformer":
        return TransformerTranslator(TransformerConfig(
            src_vocab=src_vocab, tgt_vocab=tgt_vocab, dim=cfg.tf_dim, num_heads=cfg.tf_heads, num_encoder_layers=cfg.tf_layers,
            num_decoder_layers=cfg.tf_layers, ffn_dim=cfg.tf_ff, dropout=cfg.tf_dropout))
    return Seq2Seq(Seq2SeqConfig(src_vocab=src_vocab, tgt_vocab=tgt_vocab, decoder=name,
                                 emb_dim=cfg.emb_dim, hidden=cfg.hidden, attn_dim=cfg.attn_dim))


def _evaluate(model, corpus, test, batch_size):
    hyps, refs, lengths = [], [], []
    for idx in batches_in_order(test, batch_size):
        part = [test[i] for i in idx]
        src, mask = source_batch([s for s, _ in part])
        out = greedy(model, src, mask, max_len=length_guard(len(t) for _, t in part))
        for h, (s, t) in zip(out, part):
            hyps.append(corpus.tgt_vocab.decode(h.tokens))
            refs.append(corpus.tgt_vocab.decode(t))
            lengths.append(len(s))
    return hyps, refs, lengths


def run(cfg: BottleneckConfig, out: str | Path | None = None, *, progress: bool = False, keep_outputs: bool = False) -> dict:
    """Train each decoder, evaluate by source length; write table.md, results.json, bottleneck.png to ``out``.

    ``keep_outputs``: also keep each model's test hypotheses, references and source lengths
    (``"outputs"``), for statistics over sentences (``attnlab.experiments.length``)."""
    if out is not None:
        claim(out, FILES)  # before any work: a file of the user's there is refused
    corpus = build_corpus(load_dataset(cfg.data, n=cfg.n, seed=cfg.seed, max_digits=cfg.max_digits))
    test = corpus.test[: cfg.test_size]
    buckets = metrics.length_buckets([len(s) for s, _ in test], cfg.buckets)
    tcfg = TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed,
                       eval_every=0, save_every=0, log_every=max(1, cfg.steps // 5))
    results = {"config": asdict(cfg), "buckets": buckets, "models": {}}
    for dec in cfg.decoders:
        model = _build(dec, cfg, len(corpus.src_vocab), len(corpus.tgt_vocab))
        t0 = time.perf_counter()
        r = train(model, corpus.train, [], replace(tcfg, lr=cfg.tf_lr) if dec == "transformer" else tcfg,
                  progress=progress, desc=dec)
        model.eval()
        hyps, refs, lengths = _evaluate(model, corpus, test, cfg.batch_size)
        results["models"][dec] = {
            "overall": metrics.scores(hyps, refs),
            "by_length": metrics.by_length(hyps, refs, lengths, buckets),
            "train_loss": r.train_loss,
            "tokens_per_s": r.tokens_per_s,
            "seconds": time.perf_counter() - t0,
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        if keep_outputs:
            results["models"][dec]["outputs"] = {"hyps": hyps, "refs": refs, "lengths": lengths}
    if out is not None:
        out = write_results(out, results, table(results))
        plot(results, out / "bottleneck.png")
    return results


def table(results: dict) -> str:
    """A Markdown table: one row per length bucket, exact match / chrF per decoder."""
    decs = list(results["models"])
    head = "| source length | n | " + " | ".join(f"{d} exact / chrF" for d in decs) + " |"
    lines = [head, "|" + "---|" * (2 + len(decs))]
    for i, (lo, hi) in enumerate(results["buckets"]):
        n = results["models"][decs[0]]["by_length"][i]["n"]
        cells = [f"{results['models'][d]['by_length'][i]['exact']:.1f} / {results['models'][d]['by_length'][i]['chrf']:.1f}" for d in decs]
        lines.append(f"| {lo}–{hi} | {n} | " + " | ".join(cells) + " |")
    cells = [f"{results['models'][d]['overall']['exact']:.1f} / {results['models'][d]['overall']['chrf']:.1f}" for d in decs]
    n = results["models"][decs[0]]["overall"]["n"]
    lines.append(f"| all | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path | None:
    """chrF against source length, one line per decoder (needs matplotlib; returns None without it)."""
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    mids = [(lo + hi) / 2 for lo, hi in results["buckets"]]
    for dec, r in results["models"].items():
        ax.plot(mids, [row["chrf"] for row in r["by_length"]], marker="o", label=dec)
    ax.set_xlabel(f"source length (tokens), {results['config']['data']}")
    ax.set_ylabel("chrF (test)")
    ax.set_title("The fixed-vector bottleneck and attention")
    ax.legend()
    return save_figure(plt, fig, path)


__all__ = ["BottleneckConfig", "run", "table", "plot", "DECODERS", "MODEL_NAMES"]
