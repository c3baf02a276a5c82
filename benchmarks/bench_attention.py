"""attnlab.attention against SDPA called directly and a naive matmul–softmax–matmul.

    .venv/bin/python benchmarks/bench_attention.py [--sizes 512 1024 2048 4096] [--repeats 7] [--padding] [--causal]

b=1, h=8, d=64, float32, self-attention without a mask. For each n the four
variants run interleaved (round-robin, one call each per round) so that load
on the machine hits them alike. The figure is the best (minimum) time over
the rounds: on a shared machine, load only ever adds time, so the minimum is
the steadiest estimate of each variant's own cost (medians are printed too).
Ratios: fast path vs SDPA (throughput, higher is better; target ≥ 0.95 at
n ≥ 1024) and need_weights=True vs naive (time, lower is better; target ≤ 1.3).
``--causal``: every variant causal (without a mask). ``--padding``: every variant gets a (1, 1, 1, n) bool key padding mask with the
last n/8 keys padded (what the masked path costs: the non-finite guard and the
fully-masked-row fix run on every masked call).
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import attnlab

MASK: list[torch.Tensor | None] = [None]  # the padding mask of this run (``--padding``), else None
CAUSAL = [False]  # ``--causal``: every variant causal (SDPA's is_causal, attnlab's causal=True)


def naive(q, k, v):
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
    if MASK[0] is not None:
        s = s.masked_fill(~MASK[0], float("-inf"))
    if CAUSAL[0]:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


VARIANTS = {
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=MASK[0], is_causal=CAUSAL[0]),
    "attnlab_fast": lambda q, k, v: attnlab.attention(q, k, v, mask=MASK[0], causal=CAUSAL[0])[0],
    "naive": naive,
    "attnlab_weights": lambda q, k, v: attnlab.attention(q, k, v, mask=MASK[0], causal=CAUSAL[0],
                                                         need_weights=True)[0],
}


def timed(fn, q, k, v, backward: bool) -> float:
    start = time.perf_counter()
    out = fn(q, k, v)
    if backward:
        out.sum().backward()
    return time.perf_counter() - start


def run(sizes, repeats, threads, padding: bool = False) -> list[dict]:
    torch.set_num_threads(threads)
    rows = []
    for n in sizes:
        for backward in (False, True):
            torch.manual_seed(0)
            q, k, v = (torch.randn(1, 8, n, 64, requires_grad=backward) for _ in range(3))
            if MASK[0] is not None or padding:
                MASK[0] = (torch.arange(n) < n - n // 8).view(1, 1, 1, n)
            times = {name: [] for name in VARIANTS}
            for fn in VARIANTS.values():  # warm-up
                timed(fn, q, k, v, backward)
            for _ in range(repeats):
                for name, fn in VARIANTS.items():
                    q.grad = k.grad = v.grad = None
                    times[name].append(timed(fn, q, k, v, backward))
            med = {name: min(ts) for name, ts in times.items()}
            medians = {name: statistics.median(ts) for name, ts in times.items()}
            rows.append({"n": n, "mode": "fwd+bwd" if backward else "fwd", **med})
            print(
                f"n={n:5d} {rows[-1]['mode']:8s} "
                + "  ".join(f"{name}={1e3 * t:8.2f}ms" for name, t in med.items())
                + f"  fast/sdpa throughput={med['sdpa'] / med['attnlab_fast']:.3f}"
                + f"  weights/naive time={med['attnlab_weights'] / med['naive']:.3f}"
                + f"  (medians: fast/sdpa={medians['sdpa'] / medians['attnlab_fast']:.3f},"
                + f" weights/naive={medians['attnlab_weights'] / medians['naive']:.3f})",
                flush=True,
            )
    return rows


def markdown(rows) -> str:
    lines = [
        "| n | mode | SDPA ms | attnlab fast ms | naive ms | attnlab need_weights ms | fast ÷ SDPA throughput | need_weights ÷ naive time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['mode']} | {1e3 * r['sdpa']:.2f} | {1e3 * r['attnlab_fast']:.2f} | {1e3 * r['naive']:.2f} | "
            f"{1e3 * r['attnlab_weights']:.2f} | {r['sdpa'] / r['attnlab_fast']:.3f} | {r['attnlab_weights'] / r['naive']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--padding", action="store_true", help="a (1, 1, 1, n) key padding mask, n/8 keys padded")
    p.add_argument("--causal", action="store_true", help="causal attention (SDPA's is_causal, attnlab's causal=True)")
    args = p.parse_args()
    CAUSAL[0] = args.causal
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}, "
          f"padding={args.padding}, causal={args.causal}")
    rows = run(args.sizes, args.repeats, args.threads, args.padding)
    print()
    print(markdown(rows))


if __name__ == "__main__":
    main()
