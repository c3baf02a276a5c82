"""The block-sparse kernel before and after a change, side by side in one process.

    git archive COMMIT src | tar -x -C /tmp/base && mkdir -p /tmp/basepkg \\
        && cp -r /tmp/base/src/attnlab /tmp/basepkg/attnlab_base
    PYTHONPATH=src OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_sparse_ab.py --base /tmp/basepkg \\
        [--pattern window] [--n 16384] [--backward] [--rounds 12]

The other commit's package is imported under the name ``attnlab_base`` (attnlab imports
itself relatively, so a renamed copy works), and the two calls alternate, one each per
round, the order flipped every round, so that load on a shared machine hits both alike.
b=1, h=8, d=64, fp32, one thread, block 64; the patterns of ``bench_sparse.py`` (window
w = 256 each side; Longformer: + 64 global tokens; BigBird: + 2 random 64-blocks per row).
Prints the median and minimum seconds per call of each and their ratio (after ÷ before).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time

import torch


def pattern(P, name: str):
    win = P.sliding_window(256)
    if name == "window":
        return win
    glob = win | P.global_tokens(range(64))
    return glob if name == "longformer" else glob | P.random_blocks(2, 64, seed=0)


def runner(pkg: str, name: str, q, k, v, backward: bool):
    P = importlib.import_module(f"{pkg}.patterns")
    attend = importlib.import_module(f"{pkg}.kernels").block_sparse_attention
    pat = pattern(P, name)

    def call():
        if backward:
            attend(q, k, v, pat, block=64)[0].sum().backward()
        else:
            with torch.no_grad():
                attend(q, k, v, pat, block=64)

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="a directory holding the other commit's package as attnlab_base")
    ap.add_argument("--pattern", choices=["window", "longformer", "bigbird"], default="window")
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    sys.path.insert(0, args.base)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 8, args.n, 64, requires_grad=args.backward) for _ in range(3))
    before = runner("attnlab_base", args.pattern, q, k, v, args.backward)
    after = runner("attnlab", args.pattern, q, k, v, args.backward)
    for _ in range(2):  # warm-up: plans, allocator
        before(), after()
    times: dict = {before: [], after: []}
    for r in range(args.rounds):
        for call in (before, after) if r % 2 == 0 else (after, before):
            t = time.perf_counter()
            call()
            times[call].append(time.perf_counter() - t)
    tb, ta = times[before], times[after]
    mb, ma = statistics.median(tb), statistics.median(ta)
    mode = "fwd+bwd" if args.backward else "fwd"
    print(f"{args.pattern} n={args.n} {mode}: before median {mb:.4f} s (min {min(tb):.4f}), "
          f"after median {ma:.4f} s (min {min(ta):.4f}); after/before median {ma / mb:.3f}, min {min(ta) / min(tb):.3f}")


if __name__ == "__main__":
    main()
