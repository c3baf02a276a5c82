"""Forward+backward time of CBAM, SE and ECA attached to a 3×3 convolution, as ratios to the convolution alone.

    python benchmarks/bench_vision.py [--batch 64 --channels 256 --size 28 --repeats 3 --threads 2 --device cpu]

Reference: ``nn.Conv2d(C, C, 3, padding=1)`` on a (b, C, H, W) map, forward + backward.
Candidates: the same convolution followed by the gate (``attnlab.nn``), forward + backward.
Repeats are interleaved (conv, conv+SE, conv+ECA, conv+CBAM, conv, ...); the figure is the
median time of each and its ratio to the median of the plain convolution in the same run.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch import nn

from attnlab.nn import CBAM, ECA, SqueezeExcite


def timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = a.channels
    conv = nn.Conv2d(c, c, 3, padding=1).to(a.device)
    gates = {"SE (r=16)": SqueezeExcite(c, 16), "ECA (adaptive k)": ECA(c), "CBAM (r=16, 7×7)": CBAM(c, 16, 7)}
    models = {"conv 3×3 (reference)": conv, **{k: nn.Sequential(conv, g.to(a.device)) for k, g in gates.items()}}
    x = torch.randn(a.batch, c, a.size, a.size, device=a.device, requires_grad=True)

    def step(m):
        def run():
            x.grad = None
            m.zero_grad(set_to_none=True)
            m(x).sum().backward()

        return run

    for m in models.values():  # warm-up
        step(m)()
    times: dict[str, list[float]] = {k: [] for k in models}
    for _ in range(a.repeats):
        for k, m in models.items():
            times[k].append(timed(step(m), a.device))
    ref = statistics.median(times["conv 3×3 (reference)"])
    print(f"forward+backward on ({a.batch}, {c}, {a.size}, {a.size}), {a.device}, {a.threads} threads, "
          f"{a.repeats} interleaved repeats, median; torch {torch.__version__}, {platform.processor() or platform.machine()}")
    print("| module | median ms | ratio to conv |")
    print("|---|---:|---:|")
    for k, ts in times.items():
        med = statistics.median(ts)
        print(f"| {k} | {1000 * med:.1f} | {med / ref:.3f} |")


if __name__ == "__main__":
    main()
