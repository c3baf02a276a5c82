"""The recommendation experiment: does attention over a user's history recommend the next item better?

Claim (the third tutorial): attention is the state of the art in recommender systems, through
target attention (DIN; Zhou et al. 2018, https://arxiv.org/abs/1706.06978) and causal
self-attention over the history (SASRec; Kang & McAuley 2018, https://arxiv.org/abs/1808.09781).

Data: ``attnlab.data.interactions`` (no installable package ships interaction data for offline
use). Its rule: the next item is, with probability ``follow``, the successor of the item ``lag``
steps back, otherwise a random item of one of the user's 1–3 interests; so the history item
that caused the next one is known.

Four models, each scoring a candidate item c by u · e_c (SASRec: F_t · M_c, its shared
embedding), trained with the same examples (a random cut of a user's history, the next item and
``train_negatives`` random items; sampled-softmax cross-entropy), steps, batches and learning rate:

* ``mean``: u = W · mean of the history's embeddings (a bag: no order, no candidate);
* ``gru``: u = W · the last state of a GRU over the history (order, no candidate);
* ``din``: u = W · TargetAttention(e_c, history) (softmax; the candidate picks, no order);
* ``sasrec``: two causal SASRec blocks, the last position's state (order and attention).

Evaluation (the SASRec protocol): each user's last item is held out; it is ranked among 100
random items the user never interacted with; hit rate@10 and NDCG@10, mean and a 95 %
t-interval over seeds. And what the attention weights pick out: the weight that DIN's target
attention (candidate = the held-out item) and SASRec's last position (last block, mean over
heads) put on the history item that caused the held-out item, against chance (1 / history length).

``RecommendationConfig.quick()`` is a version that runs in well under a minute on one thread.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .._files import claim
from ..data.interactions import InteractionConfig, Interactions, generate
from ..nn.recommendation import SASRec, TargetAttention, item_ids
from ..train.classify import ClassifierTask, train_classifier
from ._outputs import write_results
from .distance import interval

MODELS = ("mean", "gru", "din", "sasrec")


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md")


@dataclass
class RecommendationConfig:
    data: InteractionConfig = field(default_factory=InteractionConfig)
    models: tuple[str, ...] = MODELS
    seeds: int = 3
    steps: int = 2000
    batch_size: int = 128
    lr: float = 1e-2
    dim: int = 32
    window: int = 50  # the most recent items a model sees
    train_negatives: int = 20
    eval_negatives: int = 100
    k: int = 10  # hit rate@k, NDCG@k

    @classmethod
    def quick(cls) -> RecommendationConfig:
        return cls(data=InteractionConfig(num_users=500, min_len=12, max_len=24), seeds=2, steps=800,
                   batch_size=64, dim=16, window=20, train_negatives=10)


# ---- the models: a user vector u (b, m, d) for candidates (b, m), scored u · e_c --------------

class Recommender(nn.Module):
    """One of ``MODELS`` over item ids 1 … ``cfg.data.num_items`` (0 = padding), seeing ``cfg.window`` items."""

    def __init__(self, kind: str, cfg: RecommendationConfig):
        super().__init__()
        if kind not in MODELS:
            raise ValueError(f"model must be one of {MODELS}; got {kind!r}")
        n_items, d = cfg.data.num_items, cfg.dim
        self.kind, self.num_items, self.window = kind, n_items, cfg.window
        if kind == "sasrec":
            self.sasrec = SASRec(n_items, d, cfg.window, num_layers=2, num_heads=1)
            return
        self.emb = nn.Embedding(n_items + 1, d, padding_idx=0)
        self.proj = nn.Linear(d, d)
        if kind == "gru":
            self.gru = nn.GRU(d, d, batch_first=True)
        elif kind == "din":
            self.attn = TargetAttention(d, hidden_dim=2 * d)

    def _check(self, hist: torch.Tensor, cands: torch.Tensor) -> None:
        item_ids("hist", hist, self.num_items)
        item_ids("cands", cands, self.num_items)
        if not 1 <= hist.shape[1] <= self.window:
            raise ValueError(f"hist must be (b, n) with 1 <= n <= window = {self.window} (a user with fewer items "
                             f"is left-padded with 0); got shape {tuple(hist.shape)}")
        if cands.shape[0] != hist.shape[0]:
            raise ValueError(f"hist and cands must have one row per user each; got hist {tuple(hist.shape)}, "
                             f"cands {tuple(cands.shape)}")

    def forward(self, hist: torch.Tensor, cands: torch.Tensor, need_weights: bool = False):
        """hist (b, n) left-padded item ids, cands (b, m) → scores (b, m) [, weights (b, m, n)]."""
        self._check(hist, cands)
        if self.kind == "sasrec":
            states, ws = self.sasrec(hist, need_weights=True) if need_weights else (self.sasrec(hist), None)
            s = self.sasrec.score(states[:, -1], cands)
            return (s, ws[-1][:, :, -1].mean(1)) if need_weights else s  # (b, n): last block and position, head mean
        mask, e = hist != 0, self.emb(hist)  # (b, n), (b, n, d)
        c = self.emb(cands)  # (b, m, d)
        w = None
        if self.kind == "mean":
            u = (e.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)).unsqueeze(1)  # (b, 1, d)
        elif self.kind == "gru":
            u = self.gru(e)[0][:, -1:]  # (b, 1, d): the last (most recent) position
        else:
            (b, m), (n, d) = cands.shape, e.shape[1:]
            pooled, w = self.attn(c.reshape(b * m, d), e.repeat_interleave(m, 0),
                                  mask=mask.repeat_interleave(m, 0), need_weights=need_weights)
            u = pooled.view(b, m, d)
            w = None if w is None else w.view(b, m, n)
        s = (self.proj(u) * c).sum(-1)  # (b, m)
        return (s, w) if need_weights else s


# ---- examples ---------------------------------------------------------------------------------

def _window(items: np.ndarray, end: int, n: int) -> np.ndarray:
    """The ``n`` items before position ``end``, left-padded with 0."""
    out = np.zeros(n, dtype=np.int64)
    part = items[max(0, end - n):end]
    out[n - len(part):] = part
    return out


def train_batch(data: Interactions, cfg: RecommendationConfig, rng: np.random.Generator):
    """hist (b, window), cands (b, 1 + negatives) with the true next item first; cuts before the held-out item."""
    users = rng.integers(len(data.histories), size=cfg.batch_size)
    hist, pos = [], []
    for u in users:
        h = data.histories[u]
        t = int(rng.integers(1, len(h) - 1))  # predict h[t] from h[:t]; h[-1] is held out
        hist.append(_window(h, t, cfg.window))
        pos.append(h[t])
    neg = rng.integers(1, cfg.data.num_items + 1, size=(cfg.batch_size, cfg.train_negatives))
    cands = np.concatenate([np.array(pos)[:, None], neg], 1)
    return torch.from_numpy(np.stack(hist)), torch.from_numpy(cands)


def held_out(data: Interactions, cfg: RecommendationConfig, seed: int):
    """hist (users, window), cands (users, 1 + eval_negatives): the held-out item first, then items the user never had;
    source (users,): the held-out item's cause as an index into the window (−1: none, or outside it)."""
    rng = np.random.default_rng(50_000 + seed)
    hist, cands, source = [], [], []
    for h, src in zip(data.histories, data.sources):
        end = len(h) - 1
        hist.append(_window(h, end, cfg.window))
        unseen = np.setdiff1d(np.arange(1, cfg.data.num_items + 1), h)
        cands.append(np.concatenate([[h[end]], rng.choice(unseen, size=cfg.eval_negatives, replace=False)]))
        s = int(src[end])
        source.append(cfg.window - (end - s) if s >= 0 and end - s <= cfg.window else -1)
    return torch.from_numpy(np.stack(hist)), torch.from_numpy(np.stack(cands)), np.array(source)


# ---- training and evaluation --------------------------------------------------------------------

def train_one(kind: str, data: Interactions, cfg: RecommendationConfig, seed: int) -> Recommender:
    """Train one model with ``train.fit`` (Adam, sampled-softmax cross-entropy: the true item is candidate 0,
    batches from a generator seeded with ``seed``); returns it in evaluation mode."""
    torch.manual_seed(seed)
    model = Recommender(kind, cfg)
    rng = np.random.default_rng(seed)
    target = torch.zeros(cfg.batch_size, dtype=torch.long)  # the true item is candidate 0

    def draw(step: int) -> tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        return train_batch(data, cfg, rng), target

    train_classifier(ClassifierTask(model, draw, steps=cfg.steps, lr=cfg.lr, desc="recommendation"))
    return model.eval()


def evaluate(model: Recommender, test, cfg: RecommendationConfig, chunk: int = 100) -> dict:
    """Hit rate@k, NDCG@k and, for the attention models, the weight on the held-out item's cause."""
    hist, cands, source = test
    ranks, on_source = [], []
    with torch.no_grad():
        for i in range(0, len(hist), chunk):
            h, c = hist[i:i + chunk], cands[i:i + chunk]
            if model.kind in ("din", "sasrec"):
                s, w = model(h, c, need_weights=True)
                w = w if model.kind == "sasrec" else w[:, 0]  # DIN: the weights for the held-out item
                src = torch.from_numpy(source[i:i + chunk])
                has = src >= 0
                on_source += w[has, src[has]].tolist()
            else:
                s = model(h, c)
            ranks += (s[:, 1:] > s[:, :1]).sum(1).tolist()
    r = np.array(ranks)
    hits = r < cfg.k
    out = {"hr": float(hits.mean()), "ndcg": float(np.where(hits, 1 / np.log2(r + 2), 0.0).mean())}
    if on_source:
        out["weight_on_source"] = float(np.mean(on_source))
    return out


def chance_weight(test) -> float:
    """The weight on the source item if every real history item weighed alike: mean of 1 / history length."""
    hist, _, source = test
    n = (hist != 0).sum(1).numpy()
    return float(np.mean(1 / n[source >= 0]))


def run(cfg: RecommendationConfig, out_dir: str | Path | None = None, *, progress=None) -> dict:
    if out_dir is not None:
        claim(out_dir, FILES)  # before any work: a file of the user's there is refused
    t0 = time.perf_counter()
    per_seed: dict[str, dict[str, list[float]]] = {m: {} for m in cfg.models}
    chance = []
    for seed in range(cfg.seeds):
        data = generate(cfg.data, seed=seed)
        test = held_out(data, cfg, seed)
        chance.append(chance_weight(test))
        for kind in cfg.models:
            got = evaluate(train_one(kind, data, cfg, seed), test, cfg)
            for key, v in got.items():
                per_seed[kind].setdefault(key, []).append(v)
            if progress:
                progress(f"seed {seed} {kind:6s}: hit rate@{cfg.k} {got['hr']:.3f}, NDCG@{cfg.k} {got['ndcg']:.3f}")
    results = {"config": asdict(cfg), "per_seed": per_seed,
               "metrics": {m: {key: interval(v) for key, v in d.items()} for m, d in per_seed.items()},
               "chance_weight_on_source": float(np.mean(chance)),
               "chance_hr": cfg.k / (1 + cfg.eval_negatives), "seconds": time.perf_counter() - t0}
    if out_dir is not None:
        write_results(out_dir, results, table(results), indent=1)
    return results


def table(results: dict) -> str:
    k = results["config"]["k"]

    def cell(mu_hw) -> str:
        mu, hw = mu_hw
        return f"{mu:.3f} ± {hw:.3f}" if hw == hw else f"{mu:.3f}"

    lines = [f"| model | hit rate@{k} | NDCG@{k} | weight on the cause |", "|---|---|---|---|"]
    for m, d in results["metrics"].items():
        w = cell(d["weight_on_source"]) if "weight_on_source" in d else "–"
        lines.append(f"| {m} | {cell(d['hr'])} | {cell(d['ndcg'])} | {w} |")
    lines.append(f"| chance | {results['chance_hr']:.3f} | | {results['chance_weight_on_source']:.3f} |")
    return "\n".join(lines) + "\n"


__all__ = ["RecommendationConfig", "Recommender", "run", "table", "evaluate", "train_one", "held_out", "MODELS"]
