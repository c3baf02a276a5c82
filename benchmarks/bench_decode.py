"""Decoding steps with the keys' projection precomputed vs recomputed at every step.

    .venv/bin/python benchmarks/bench_decode.py [--repeats 5] [--src-len 50]

A Bahdanau decoder loop (AdditiveAttention + GRUCell, b=32, d=256, d_a=256,
50 output steps) run twice side by side: reference = ``attn(s, H)`` which
projects all keys W_k h_j each step; candidate = ``attn(s, H, projected_keys=P)``
with P = W_k H computed once per sentence. Interleaved repeats, median.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnlab.nn import AdditiveAttention


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--src-len", type=int, default=50)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    b, d, da = 32, 256, 256
    attn, cell = AdditiveAttention(d, 2 * d, da), torch.nn.GRUCell(2 * d + d, d)
    H = torch.randn(b, a.src_len, 2 * d)
    emb = torch.randn(b, d)

    @torch.no_grad()
    def decode(pre: bool) -> float:
        t = time.perf_counter()
        s = torch.zeros(b, d)
        P = attn.precompute(H) if pre else None
        for _ in range(a.steps):
            c, _ = attn(s, H, projected_keys=P)
            s = cell(torch.cat([emb, c], -1), s)
        return time.perf_counter() - t

    decode(True), decode(False)  # warm up
    times = {"recompute": [], "precomputed": []}
    for _ in range(a.repeats):
        times["recompute"].append(decode(False))
        times["precomputed"].append(decode(True))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"b={b} src_len={a.src_len} d={d} d_a={da}, {a.steps} steps, median of {a.repeats}, {a.threads} thread(s)")
    for k, v in med.items():
        print(f"  {k:12s} {v * 1000:.1f} ms")
    print(f"  speed-up {med['recompute'] / med['precomputed']:.2f}x (target >= 2)")


if __name__ == "__main__":
    main()
