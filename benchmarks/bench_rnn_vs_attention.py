"""The tutorials' claim: an RNN is serial, self-attention parallel. Forward time of a GRU encoder
against a self-attention encoder layer of the same width, over sequence lengths n.

    .venv/bin/python benchmarks/bench_rnn_vs_attention.py [--sizes 64 256 1024 4096] [--plot benchmarks/rnn_vs_attention.png]

Width 256, batch 8, float32, inference (eval, no_grad). The GRU (torch.nn.GRU,
one layer, hidden 256) must run its n steps one after another; the encoder
layer (attnlab.nn.TransformerEncoderLayer, 8 heads, FFN 1024) processes all n
positions in a handful of large matrix products, at O(n²) cost in attention.
Interleaved repeats, medians. Also reported: the number of sequential steps
(n for the GRU, 1 layer for attention) — the property behind the claim.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch import nn

from attnlab.nn import TransformerEncoderLayer


def run(sizes, repeats, dim=256, batch=8) -> list[dict]:
    torch.manual_seed(0)
    gru = nn.GRU(dim, dim, batch_first=True).eval()
    att = TransformerEncoderLayer(dim, 8, ffn_dim=4 * dim, dropout=0.0).eval()
    variants = {"gru": lambda x: gru(x)[0], "self_attention": lambda x: att(x)}
    rows = []
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(batch, n, dim)
            for f in variants.values():
                f(x)
            times = {k: [] for k in variants}
            for _ in range(repeats):
                for k, f in variants.items():
                    start = time.perf_counter()
                    f(x)
                    times[k].append(time.perf_counter() - start)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append({"n": n, **med, "ratio": med["gru"] / med["self_attention"]})
            print(f"n={n:5d} gru={1e3 * med['gru']:9.2f}ms self-attention={1e3 * med['self_attention']:9.2f}ms "
                  f"gru/attention={rows[-1]['ratio']:.2f}", flush=True)
    return rows


def plot(rows, path: str, threads: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return
    ns = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.loglog(ns, [1e3 * r["gru"] for r in rows], "o-", label="GRU encoder (n serial steps)")
    ax.loglog(ns, [1e3 * r["self_attention"] for r in rows], "s-", label="self-attention encoder layer")
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("forward time, ms (median)")
    ax.set_title(f"width 256, batch 8, CPU, {threads} thread(s)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--plot", default="benchmarks/rnn_vs_attention.png")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}")
    rows = run(args.sizes, args.repeats)
    print()
    print("| n | GRU ms | self-attention layer ms | GRU ÷ attention time | sequential steps GRU / attention |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {1e3 * r['gru']:.2f} | {1e3 * r['self_attention']:.2f} | {r['ratio']:.2f} | {r['n']} / 1 |")
    if args.plot:
        plot(rows, args.plot, args.threads)


if __name__ == "__main__":
    main()
