"""The alignment experiment: how well does learned attention align words, against gold links?

Claim (the source tutorials; Bahdanau et al. 2015, Fig. 3, https://arxiv.org/abs/1409.0473): the weights
of an attentional encoder–decoder are a soft alignment between target and source words.

Measured on the Greek–English New Testament with its manually corrected word alignment
(``attnlab.data.bible``; Greek lemmas → lower-cased BSB words). ``attnlab.models.Seq2Seq``
with the Bahdanau and with the Luong decoder is trained on the training verses; on held-out
verses, the weights under teacher forcing (target word t attends the source) give two
alignments per model:

* **argmax**: each target word is linked to its most-attended source word;
* **threshold**: linked to every source word with weight ≥ ``threshold``.

Baselines: the **diagonal** (target word t ↔ source word ⌊(t + ½)·S/T⌋) and **IBM Model 1**
(``experiments/ibm1.py``, EM on all verses' words, unsupervised, as aligners are run).
The score is the alignment error rate (Och & Ney 2003) with sure links only (the manual
alignment has no "possible" links): AER = 1 − 2|A ∩ G| / (|A| + |G|); lower is better.
Reported overall and by source-length bucket, with the training budget and wall time.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .._files import claim
from ..data import Vocab, collate, encode_pairs
from ..data.bible import load_verses
from ..models import Seq2Seq, Seq2SeqConfig
from ..train import metrics
from ..train.loop import TrainConfig, train
from ..viz.heatmap import pyplot_or_none
from . import ibm1
from ._outputs import save_figure, write_results

DECODERS = ("bahdanau", "luong")


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "alignment.png")


@dataclass
class AlignmentConfig:
    max_src: int = 25  # verses with at most this many source and max_tgt target words
    max_tgt: int = 30
    max_verses: int | None = None  # cut the corpus (quick runs)
    test_size: int = 400
    source_form: str = "lemma"  # lemma | text (the Greek surface form)
    min_count: int = 2  # rarer words are <unk> for the models (IBM 1 sees every word)
    steps: int = 2000
    batch_size: int = 32
    lr: float = 3e-3
    emb_dim: int = 64
    hidden: int = 128
    attn_dim: int = 128
    threshold: float = 0.3
    ibm_iterations: int = 5
    buckets: int = 3
    decoders: tuple[str, ...] = DECODERS
    seed: int = 0

    @classmethod
    def quick(cls, **kw) -> AlignmentConfig:
        return cls(**{**dict(max_verses=400, test_size=40, steps=20, batch_size=16, emb_dim=16, hidden=24,
                             attn_dim=24, ibm_iterations=2), **kw})


def aer(predicted: set, gold: set) -> float:
    """1 − 2|A ∩ G| / (|A| + |G|) (sure links only); 0 when both are empty."""
    denom = len(predicted) + len(gold)
    return 0.0 if denom == 0 else 1.0 - 2.0 * len(predicted & gold) / denom


def corpus_aer(predicted: list[set], gold: list[set]) -> float:
    """AER over a corpus: the counts summed over sentences first."""
    hit = sum(len(p & g) for p, g in zip(predicted, gold))
    denom = sum(len(p) + len(g) for p, g in zip(predicted, gold))
    return 0.0 if denom == 0 else 1.0 - 2.0 * hit / denom


def diagonal(n_src: int, n_tgt: int) -> set[tuple[int, int]]:
    """Target word t ↔ source word ⌊(t + ½) · S / T⌋ (the centres of the two sentences' positions matched)."""
    return {(int((t + 0.5) * n_src / n_tgt), t) for t in range(n_tgt)}


def from_weights(w: torch.Tensor, threshold: float | None) -> set[tuple[int, int]]:
    """Links from one verse's weights (T, S): argmax per target word, or every weight ≥ threshold."""
    if threshold is None:
        return {(int(s), t) for t, s in enumerate(w.argmax(-1).tolist())}
    return {(int(s), int(t)) for t, s in (w >= threshold).nonzero().tolist()}


@torch.no_grad()
def attention_links(model, examples, batch_size: int, threshold: float) -> tuple[list[set], list[set]]:
    """Teacher-forced weights of every example → (argmax links, thresholded links)."""
    model.eval()
    arg, thr = [], []
    for i in range(0, len(examples), batch_size):
        part = examples[i : i + batch_size]
        b = collate(part)
        _, w = model(b.src, b.src_mask, b.tgt_in, need_weights=True)  # (b, T+1, S)
        for k, (s, t) in enumerate(part):
            wk = w[k, : len(t), : len(s)]  # target words t (not the final <eos> step) over real source words
            arg.append(from_weights(wk, None))
            thr.append(from_weights(wk, threshold))
    return arg, thr


def run(cfg: AlignmentConfig, out: str | Path | None = None, *, progress: bool = False) -> dict:
    if out is not None:
        claim(out, FILES)  # before any work: a file of the user's there is refused
    t_start = time.perf_counter()
    verses = [v for v in load_verses(source_form=cfg.source_form)
              if 0 < len(v.source) <= cfg.max_src and 0 < len(v.target) <= cfg.max_tgt]
    if cfg.max_verses is not None:
        verses = verses[: cfg.max_verses]
    g = torch.Generator().manual_seed(cfg.seed)
    order = torch.randperm(len(verses), generator=g).tolist()
    test = [verses[i] for i in order[: cfg.test_size]]
    train_v = [verses[i] for i in order[cfg.test_size :]]
    src_vocab = Vocab.build([" ".join(v.source) for v in train_v], "word", min_count=cfg.min_count)
    tgt_vocab = Vocab.build([" ".join(v.target) for v in train_v], "word", min_count=cfg.min_count)
    as_pairs = lambda vs: [(" ".join(v.source), " ".join(v.target)) for v in vs]  # noqa: E731
    train_ex, test_ex = encode_pairs(as_pairs(train_v), src_vocab, tgt_vocab), encode_pairs(as_pairs(test), src_vocab, tgt_vocab)
    assert all(len(s) == len(v.source) and len(t) == len(v.target) for (s, t), v in zip(test_ex, test))
    gold = [set(v.links) for v in test]
    lengths = [len(v.source) for v in test]
    buckets = metrics.length_buckets(lengths, cfg.buckets)
    methods: dict[str, list[set]] = {"diagonal": [diagonal(len(v.source), len(v.target)) for v in test]}
    t0 = time.perf_counter()
    table_ = ibm1.train([(v.source, v.target) for v in verses], cfg.ibm_iterations)
    methods["ibm1"] = [ibm1.align(v.source, v.target, table_) for v in test]
    seconds = {"ibm1": time.perf_counter() - t0}
    tcfg = TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, eval_every=0,
                       save_every=0, log_every=max(1, cfg.steps // 10))
    for dec in cfg.decoders:
        torch.manual_seed(cfg.seed)
        model = Seq2Seq(Seq2SeqConfig(src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab), decoder=dec,
                                      emb_dim=cfg.emb_dim, hidden=cfg.hidden, attn_dim=cfg.attn_dim))
        t0 = time.perf_counter()
        train(model, train_ex, [], tcfg, progress=progress, desc=dec)
        arg, thr = attention_links(model, test_ex, 64, cfg.threshold)
        methods[f"{dec} argmax"], methods[f"{dec} ≥{cfg.threshold:g}"] = arg, thr
        seconds[dec] = time.perf_counter() - t0
    results = {
        "config": asdict(cfg),
        "n_train": len(train_v), "n_test": len(test), "buckets": buckets,
        "aer": {m: corpus_aer(p, gold) for m, p in methods.items()},
        "aer_by_length": {m: [corpus_aer([p[i] for i in range(len(test)) if lo <= lengths[i] <= hi],
                                         [gold[i] for i in range(len(test)) if lo <= lengths[i] <= hi])
                              for lo, hi in buckets] for m, p in methods.items()},
        "seconds": seconds, "wall_seconds": time.perf_counter() - t_start,
    }
    if out is not None:
        out = write_results(out, results, table(results), ensure_ascii=False)
        plot(results, out / "alignment.png")
    return results


def table(results: dict) -> str:
    b = results["buckets"]
    lines = ["| alignment | AER (all) | " + " | ".join(f"src {lo}–{hi}" for lo, hi in b) + " |",
             "|---|---:|" + "---:|" * len(b)]
    for m, a in results["aer"].items():
        lines.append(f"| {m} | {100 * a:.1f} | " + " | ".join(f"{100 * x:.1f}" for x in results["aer_by_length"][m]) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> Path | None:
    """AER against source length, one line per alignment method (needs matplotlib; None without it)."""
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    mids = [(lo + hi) / 2 for lo, hi in results["buckets"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, curve in results["aer_by_length"].items():
        ax.plot(mids, [100 * a for a in curve], marker="o", ls="--" if m in ("diagonal", "ibm1") else "-", label=m)
    ax.set(xlabel="source verse length (words)", ylabel="AER (%), lower is better",
           title=f"Alignment error on {results['n_test']} held-out verses")
    ax.legend(fontsize=8)
    return save_figure(plt, fig, path)


__all__ = ["AlignmentConfig", "run", "table", "plot", "aer", "corpus_aer", "diagonal", "from_weights", "DECODERS"]
