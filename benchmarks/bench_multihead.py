"""attnlab.nn.MultiHeadAttention against torch.nn.MultiheadAttention (same weights).

    .venv/bin/python benchmarks/bench_multihead.py [--sizes 256 1024 4096] [--repeats 5] [--batch 1]
        [--modes fwd fwd+bwd] [--weights off on]

dim 512, 8 heads, float32, self-attention, batch-first. Modes: ``fwd`` is
inference (eval, ``torch.inference_mode``: PyTorch's native fast path runs when weights are off),
``fwd+bwd`` is training mode (dropout 0) with a backward pass. ``weights on``:
both return per-head weights (PyTorch with ``average_attn_weights=False``).
The two modules run interleaved (one call each per round); figures are
medians. Ratio = PyTorch time ÷ attnlab time (throughput ratio; target ≥ 1.0).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from attnlab.nn import MultiHeadAttention
from attnlab.nn.convert import to_torch


def timed(fn, backward: bool) -> float:
    start = time.perf_counter()
    if backward:
        fn().sum().backward()
    else:
        with torch.inference_mode():
            fn()
    return time.perf_counter() - start


def run(sizes, repeats, batch, modes=("fwd", "fwd+bwd"), weight_opts=(False, True), dim=512, heads=8) -> list[dict]:
    torch.manual_seed(0)
    ours = MultiHeadAttention(dim, heads)
    theirs = to_torch(ours)
    rows = []
    for n in sizes:
        for backward in [m == "fwd+bwd" for m in modes]:
            ours.train(backward), theirs.train(backward)
            for weights in weight_opts:
                x = torch.randn(batch, n, dim, requires_grad=backward)
                variants = {
                    "torch": lambda x=x, w=weights: theirs(x, x, x, need_weights=w, average_attn_weights=False)[0],
                    "attnlab": lambda x=x, w=weights: ours(x, need_weights=w)[0],
                }
                for fn in variants.values():
                    timed(fn, backward)  # warm-up
                times = {k: [] for k in variants}
                for _ in range(repeats):
                    for k, fn in variants.items():
                        x.grad = None
                        ours.zero_grad(set_to_none=True), theirs.zero_grad(set_to_none=True)
                        times[k].append(timed(fn, backward))
                med = {k: statistics.median(v) for k, v in times.items()}
                row = {"n": n, "mode": "fwd+bwd" if backward else "fwd", "weights": weights, **med,
                       "ratio": med["torch"] / med["attnlab"]}
                rows.append(row)
                print(f"n={n:5d} {row['mode']:8s} weights={'on ' if weights else 'off'} "
                      f"torch={1e3 * med['torch']:9.2f}ms attnlab={1e3 * med['attnlab']:9.2f}ms ratio={row['ratio']:.3f}", flush=True)
    return rows


def markdown(rows) -> str:
    lines = ["| n | mode | weights | torch.nn.MultiheadAttention ms | attnlab ms | torch ÷ attnlab (≥ 1.0 target) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        met = "" if r["ratio"] >= 1.0 else " (not met)"
        lines.append(f"| {r['n']} | {r['mode']} | {'on' if r['weights'] else 'off'} | {1e3 * r['torch']:.2f} | "
                     f"{1e3 * r['attnlab']:.2f} | {r['ratio']:.3f}{met} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--modes", nargs="+", choices=["fwd", "fwd+bwd"], default=["fwd", "fwd+bwd"])
    p.add_argument("--weights", nargs="+", choices=["off", "on"], default=["off", "on"])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}, batch={args.batch}")
    rows = run(args.sizes, args.repeats, args.batch, args.modes, [w == "on" for w in args.weights])
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
