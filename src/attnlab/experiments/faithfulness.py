"""The faithfulness experiment: does the output change when the learned attention is replaced?

Jain & Wallace 2019, "Attention is not Explanation", https://arxiv.org/abs/1902.10186 (§4: permuted
and adversarial weights); Wiegreffe & Pinter 2019, "Attention is not not Explanation",
https://arxiv.org/abs/1908.04626 (§3: uniform weights as a baseline; §4: random / adversarial
distributions as a whole model). Here on the translation lab's RNN encoder–decoder
(``attnlab.models.Seq2Seq``, Bahdanau or Luong attention), one decoder step at a time.

For every target position t of every test sentence (teacher forcing on the reference, the decoder
state s_{t-1} and input y_{t-1} those of the learned run), the step is recomputed with its attention
weights α_t replaced by α'_t (``Seq2Seq.step(..., weights_override=)``: c_t = Σ_j α'_tj h_j through the
core's weighted sum), and the next-token distributions p = p(y_t | α_t) and p' = p(y_t | α'_t) compared:

    TVD(p, p') = ½ Σ_y |p_y − p'_y|        JSD(p, p') = ½ KL(p ‖ m) + ½ KL(p' ‖ m),  m = ½ (p + p')

(natural logs: JSD ≤ ln 2 ≈ 0.693), with how often argmax p' ≠ argmax p and the next-token accuracy
against the reference. The replacements α' (rows zero on padding, summing to one over the real keys):

| name        | α'_t                                                                  |
|-------------|-----------------------------------------------------------------------|
| uniform     | 1 / n over the n real source tokens                                   |
| permuted    | α_t with its values shuffled among the real keys (the same multiset)  |
| random      | a flat Dirichlet(1, …, 1) draw over the real keys                     |
| adversarial | softmax(z) with free logits z, ``adv_steps`` Adam steps maximising    |
|             | JSD(α', α) − λ · max(0, TVD(p', p) − ε); the most different α' seen   |
|             | with TVD(p', p) ≤ ε is kept (α itself, JSD 0, if none)                 |

The adversary's row reports the attention JSD(α', α) it reached with the output held within ε:
a large JSD at a small ε means very different weights give the same prediction (attention is not
a unique explanation); the other rows say how much the prediction depends on the weights at all.

| symbol | here |
|---|---|
| α_t | the learned weights ``(b, s)`` of ``Seq2Seq.step`` |
| ε | ``epsilon`` (the adversary's TVD budget) |
| λ | ``adv_penalty`` |

``FaithfulnessConfig.quick()`` is a seconds-long smoke run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .._files import claim
from ..data import build_corpus, collate, load_dataset
from ..data.batching import batches_in_order
from ..data.vocab import PAD
from ..functional.softmax import masked_softmax
from ..models import Seq2Seq, Seq2SeqConfig
from ..train.loop import TrainConfig, train
from ..viz.heatmap import pyplot_or_none
from ..viz.heatmap import save as save_figure
from ._outputs import write_results

METHODS = ("uniform", "permuted", "random", "adversarial")


# What run() writes into its folder (claimed before any work: never a file of the user's).
FILES = ("results.json", "table.md", "faithfulness.png")


@dataclass
class FaithfulnessConfig:
    data: str = "numbers-de-en"
    n: int = 6000  # numbers in all splits (numbers-* data)
    max_digits: int = 9
    decoders: tuple[str, ...] = ("bahdanau", "luong")
    steps: int = 350
    batch_size: int = 64
    lr: float = 3e-3
    emb_dim: int = 32
    hidden: int = 64
    attn_dim: int = 64
    test_size: int = 300
    epsilon: float = 0.01  # the adversary's budget: TVD(p', p) <= epsilon
    adv_steps: int = 40
    adv_lr: float = 0.3
    adv_penalty: float = 10.0
    seed: int = 0

    def __post_init__(self):
        self.decoders = tuple(self.decoders)
        bad = [d for d in self.decoders if d not in ("bahdanau", "luong")]
        if bad or not self.decoders:
            raise ValueError(f"decoders must be a non-empty selection of bahdanau, luong; got {', '.join(self.decoders) or 'none'}")
        if not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1); got {self.epsilon}")
        for name in ("steps", "batch_size", "test_size", "adv_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")

    @classmethod
    def quick(cls, **kw) -> FaithfulnessConfig:
        small = dict(n=600, max_digits=4, steps=20, batch_size=32, emb_dim=16, hidden=24, attn_dim=24, test_size=24,
                     adv_steps=4)
        return cls(**{**small, **kw})


# -- distances ----------------------------------------------------------------------------------
def tvd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Total variation distance ½ Σ |p − q| over the last dimension: (..., V) → (...)."""
    return 0.5 * (p - q).abs().sum(-1)


def jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence (natural log, ≤ ln 2) over the last dimension: (..., V) → (...).

    Zero entries contribute 0 with a finite gradient (the logs see a clamped argument)."""
    tiny = torch.finfo(p.dtype).tiny
    m = 0.5 * (p + q)
    log_m = m.clamp_min(tiny).log()
    kl_p = (p * (p.clamp_min(tiny).log() - log_m)).sum(-1)
    kl_q = (q * (q.clamp_min(tiny).log() - log_m)).sum(-1)
    return (0.5 * (kl_p + kl_q)).clamp_min(0.0)


# -- the replacements ---------------------------------------------------------------------------
def uniform_weights(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """1/n on each of the n real keys of a row, 0 on padding: mask (b, s) bool → (b, s)."""
    m = mask.to(dtype)
    return m / m.sum(-1, keepdim=True).clamp_min(1.0)


def permuted_weights(weights: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each row's weights shuffled among its real keys (uniformly random permutation); padding stays 0.

    weights (b, s) (zero on padding), mask (b, s) bool → (b, s), the same multiset per row."""
    noise = torch.rand(weights.shape, generator=generator, device=weights.device)
    source = torch.argsort(noise.masked_fill(~mask, float("inf")), dim=-1)  # real keys in random order, then pads
    target = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)  # real keys in place order, then pads
    return torch.zeros_like(weights).scatter(-1, target, weights.gather(-1, source))


def dirichlet_weights(mask: torch.Tensor, generator: torch.Generator | None = None,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A flat Dirichlet(1, …, 1) draw over each row's real keys (normalised Exp(1) draws), 0 on padding."""
    u = torch.rand(mask.shape, generator=generator, dtype=dtype, device=mask.device)
    e = -torch.log1p(-u) * mask.to(dtype)  # Exp(1) = Gamma(1, 1) on real keys
    return e / e.sum(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)


def adversarial_weights(model: Seq2Seq, memory: dict, state: dict, y_prev: torch.Tensor, weights: torch.Tensor,
                        probs: torch.Tensor, *, epsilon: float, steps: int, lr: float, penalty: float,
                        generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Weights as far (JSD) from ``weights`` as found while the next-token distribution stays within ε (TVD).

    One decoder step, batched: weights (b, s) the learned α_t, probs (b, V) the learned p. Returns
    (α' (b, s), JSD(α', α) (b,), TVD(p', p) (b,)), TVD ≤ ε in every row (α' = α where nothing better is found).
    """
    mask = memory["mask"]
    z = (weights.clamp_min(1e-6).log() + torch.randn(weights.shape, generator=generator, dtype=weights.dtype)).detach()
    z.requires_grad_(True)
    opt = torch.optim.Adam([z], lr=lr)
    best, best_j = weights.detach().clone(), torch.zeros(weights.shape[0], dtype=weights.dtype)
    best_t = torch.zeros_like(best_j)
    for i in range(steps + 1):  # the last pass only evaluates the last update
        with torch.enable_grad():
            a = masked_softmax(z, mask)  # (b, s), zero on padding
            logits = model.step(memory, state, y_prev, weights_override=lambda _w, a=a: a)[0]
            t = tvd(torch.softmax(logits, -1), probs)  # (b,)
            j = jsd(a, weights)  # (b,)
            better = (t <= epsilon) & (j > best_j)
            best = torch.where(better[:, None], a.detach(), best)
            best_j, best_t = torch.where(better, j.detach(), best_j), torch.where(better, t.detach(), best_t)
            if i == steps:
                break
            objective = (j - penalty * torch.relu(t - epsilon)).sum()
            (grad,) = torch.autograd.grad(-objective, [z])  # not into the model's parameters
        z.grad = grad
        opt.step()
    return best, best_j, best_t


# -- the measurement ----------------------------------------------------------------------------
def measure(model: Seq2Seq, examples: list, cfg: FaithfulnessConfig) -> dict:
    """Compare the learned step with each replacement at every target position of ``examples``."""
    if model.attention is None:
        raise ValueError("the faithfulness experiment needs an attention decoder (bahdanau or luong); got 'none'")
    gen = torch.Generator().manual_seed(cfg.seed)
    keys = ("out_tvd", "out_jsd", "att_jsd", "changed", "correct")
    acc: dict[str, dict[str, list]] = {m: {k: [] for k in keys} for m in METHODS}
    learned_correct: list = []
    was = model.training
    model.eval()
    try:
        for idx in batches_in_order(examples, cfg.batch_size):
            batch = collate([examples[i] for i in idx])
            with torch.no_grad():
                memory, state = model.start(batch.src, batch.src_mask)
            mask = batch.src_mask
            for t in range(batch.tgt_in.shape[1]):
                y, gold = batch.tgt_in[:, t], batch.tgt_out[:, t]
                real = gold != PAD  # (b,)
                with torch.no_grad():
                    logits, next_state, w = model.step(memory, state, y)
                    p = torch.softmax(logits, -1)
                    learned_correct.append((p.argmax(-1) == gold)[real])
                    repl = {"uniform": uniform_weights(mask, w.dtype), "permuted": permuted_weights(w, mask, gen),
                            "random": dirichlet_weights(mask, gen, w.dtype)}
                    for name, a in repl.items():
                        q = torch.softmax(model.step(memory, state, y, weights_override=lambda _w, a=a: a)[0], -1)
                        _add(acc[name], p, q, jsd(a, w), gold, real)
                a, j_att, _ = adversarial_weights(model, memory, state, y, w, p, epsilon=cfg.epsilon,
                                                  steps=cfg.adv_steps, lr=cfg.adv_lr, penalty=cfg.adv_penalty,
                                                  generator=gen)
                with torch.no_grad():
                    q = torch.softmax(model.step(memory, state, y, weights_override=lambda _w, a=a: a)[0], -1)
                    _add(acc["adversarial"], p, q, j_att, gold, real)
                state = next_state
    finally:
        model.train(was)
    learned = torch.cat(learned_correct).float()
    out = {"positions": int(learned.numel()), "learned_accuracy": 100 * float(learned.mean()), "methods": {}}
    for name, a in acc.items():
        v = {k: torch.cat(a[k]).double() for k in keys}
        out["methods"][name] = {
            "out_tvd": float(v["out_tvd"].mean()), "out_jsd": float(v["out_jsd"].mean()),
            "att_jsd": float(v["att_jsd"].mean()), "att_jsd_median": float(v["att_jsd"].median()),
            "changed": 100 * float(v["changed"].mean()), "accuracy": 100 * float(v["correct"].mean()),
            "out_tvd_max": float(v["out_tvd"].max()),
            "att_jsd_hist": torch.histc(v["att_jsd"], bins=20, min=0.0, max=0.7).long().tolist(),
        }
    return out


def _add(acc: dict, p, q, att_jsd, gold, real) -> None:
    acc["out_tvd"].append(tvd(p, q)[real])
    acc["out_jsd"].append(jsd(p, q)[real])
    acc["att_jsd"].append(att_jsd.detach()[real])
    acc["changed"].append((p.argmax(-1) != q.argmax(-1))[real])
    acc["correct"].append((q.argmax(-1) == gold)[real])


def run(cfg: FaithfulnessConfig, out: str | Path | None = None, *, progress=None) -> dict:
    """Train each decoder on ``cfg.data``, measure on the test split; write table.md, results.json, faithfulness.png."""
    if out is not None:
        claim(out, FILES)  # before any work: a file of the user's there is refused
    t0 = time.perf_counter()
    corpus = build_corpus(load_dataset(cfg.data, n=cfg.n, seed=cfg.seed, max_digits=cfg.max_digits))
    test = corpus.test[: cfg.test_size]
    tcfg = TrainConfig(steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed, eval_every=0,
                       save_every=0, log_every=max(1, cfg.steps // 5))
    results = {"config": asdict(cfg), "models": {}}
    for dec in cfg.decoders:
        torch.manual_seed(cfg.seed)
        model = Seq2Seq(Seq2SeqConfig(src_vocab=len(corpus.src_vocab), tgt_vocab=len(corpus.tgt_vocab), decoder=dec,
                                      emb_dim=cfg.emb_dim, hidden=cfg.hidden, attn_dim=cfg.attn_dim))
        t1 = time.perf_counter()
        r = train(model, corpus.train, [], tcfg, progress=progress is not None, desc=dec)
        t2 = time.perf_counter()
        results["models"][dec] = {**measure(model, test, cfg), "train_loss": r.train_loss,
                                  "train_seconds": t2 - t1, "measure_seconds": time.perf_counter() - t2}
        if progress is not None:
            progress(f"{dec}: trained in {t2 - t1:.0f} s, measured in {time.perf_counter() - t2:.0f} s")
    results["seconds"] = time.perf_counter() - t0
    if out is not None:
        write(results, out)
    return results


def write(results: dict, out: str | Path) -> None:
    """results.json, table.md and faithfulness.png into ``out``, each written whole (temporary name, renamed)."""
    claim(out, FILES)
    out = write_results(out, results, table(results))
    plot(results, out / "faithfulness.png")


def table(results: dict) -> str:
    """One row per decoder and replacement: output TVD / JSD, argmax changed, accuracy, attention JSD."""
    eps = results["config"]["epsilon"]
    lines = ["| decoder | weights | output TVD | output JSD | argmax changed % | next-token accuracy % | attention JSD from learned (mean / median) |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for dec, r in results["models"].items():
        lines.append(f"| {dec} | learned | 0 | 0 | 0 | {r['learned_accuracy']:.1f} | 0 |")
        for name, m in r["methods"].items():
            label = f"adversarial (TVD ≤ {eps:g})" if name == "adversarial" else name
            lines.append(f"| {dec} | {label} | {m['out_tvd']:.4f} | {m['out_jsd']:.4f} | {m['changed']:.1f} | "
                         f"{m['accuracy']:.1f} | {m['att_jsd']:.3f} / {m['att_jsd_median']:.3f} |")
    first = next(iter(results["models"].values()))
    lines.append(f"\n{first['positions']} target positions (teacher forcing on the reference), "
                 f"{results['config']['data']} test split; JSD in nats (≤ ln 2 ≈ 0.693).")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str | Path) -> Path | None:
    """Left: mean output TVD per replacement and decoder; right: the adversary's attention JSD histogram."""
    plt = pyplot_or_none()
    if plt is None:  # no matplotlib: the table and JSON only
        return None
    decs = list(results["models"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(decs)
    for i, dec in enumerate(decs):
        ms = results["models"][dec]["methods"]
        left.bar([k + i * width for k in range(len(METHODS))], [ms[m]["out_tvd"] for m in METHODS], width, label=dec)
        edges = [0.7 * k / 20 for k in range(21)]
        right.stairs(ms["adversarial"]["att_jsd_hist"], edges, label=dec)
    left.set_xticks([k + 0.4 - width / 2 for k in range(len(METHODS))], METHODS)
    left.set(ylabel="mean TVD of the next-token distribution", title="output change when the weights are replaced")
    left.legend()
    eps = results["config"]["epsilon"]
    right.set(xlabel="JSD(adversarial weights, learned weights), nats", ylabel="target positions",
              title=f"adversarial weights with output TVD ≤ {eps:g}")
    right.legend()
    fig.tight_layout()
    return save_figure(fig, path)  # written whole, then renamed


__all__ = ["FaithfulnessConfig", "METHODS", "run", "measure", "write", "table", "plot", "tvd", "jsd",
           "uniform_weights", "permuted_weights", "dirichlet_weights", "adversarial_weights"]
