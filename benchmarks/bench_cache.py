"""Cached generation against full recomputation of the prefix at every step.

    .venv/bin/python benchmarks/bench_cache.py [--tokens 512] [--repeats 3]

A GPT (attnlab.models.GPT: 4 layers, dim 256, 8 heads, learned positions,
block_size ≥ prompt + tokens so that nothing is cropped) generates ``--tokens``
characters greedily after a 1-token prompt, once with the key/value cache
(one token through the model per step) and once recomputing the whole prefix
at every step. Both produce the same tokens (checked); runs are interleaved and
the figure is the median. Ratio = recompute time ÷ cached time (target ≥ 5).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from attnlab.models.gpt import GPT, GPTConfig


def run(tokens: int, repeats: int, dim: int, layers: int, heads: int) -> dict:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=96, block_size=tokens + 1, dim=dim, num_layers=layers, num_heads=heads)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    outs = {}
    times = {"cached": [], "recompute": []}
    model.generate(prompt, 8, temperature=0)  # warm-up
    for _ in range(repeats):
        for name, use_cache in (("cached", True), ("recompute", False)):
            start = time.perf_counter()
            outs[name] = model.generate(prompt, tokens, temperature=0, use_cache=use_cache)
            times[name].append(time.perf_counter() - start)
    same = torch.equal(outs["cached"], outs["recompute"])
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"tokens": tokens, **med, "ratio": med["recompute"] / med["cached"], "same_tokens": same}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}")
    r = run(args.tokens, args.repeats, args.dim, args.layers, args.heads)
    met = "" if r["ratio"] >= 5 else " (not met)"
    print("| tokens | model | cached s | recompute s | recompute ÷ cached (≥ 5 target) | same tokens |")
    print("|---|---|---|---|---|---|")
    print(f"| {r['tokens']} | {args.layers} layers, dim {args.dim}, {args.heads} heads | {r['cached']:.2f} | "
          f"{r['recompute']:.2f} | {r['ratio']:.1f}{met} | {'yes' if r['same_tokens'] else 'NO'} |")


if __name__ == "__main__":
    main()
