"""Additive attention scores, forward + backward: chunked kernel vs the naive broadcast.

    .venv/bin/python benchmarks/bench_additive.py [--repeats 3] [--threads 2,1] [--b 32 --q 200 --k 200 --d 256 --da 256]

Reference: ``attnlab.scores.additive`` (builds and keeps the (b, q, k, d_a)
tensor). Candidate: ``attnlab.kernels.chunked_additive`` (chunks of queries,
recomputed in backward). Each measurement runs in a fresh subprocess; peak
memory is the growth of the process's max RSS over its baseline; repeats are
interleaved (naive, chunked, for each thread count in turn, then again) and
the median is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from attnlab.kernels.chunked_additive import DEFAULT_MAX_ELEMS, _chunk

CHILD = r"""
import json, resource, sys, time, torch
torch.set_num_threads(int(sys.argv[7]))
from attnlab import scores
from attnlab.kernels.chunked_additive import chunked_additive_scores
mode, b, q, k, d, da = sys.argv[1], *map(int, sys.argv[2:7])
g = torch.Generator().manual_seed(0)
Q = torch.randn(b, q, d, generator=g, requires_grad=True); K = torch.randn(b, k, d, generator=g, requires_grad=True)
wq = torch.randn(da, d, generator=g).div_(d**0.5).requires_grad_(); wk = torch.randn(da, d, generator=g).div_(d**0.5).requires_grad_()
v = torch.randn(da, generator=g, requires_grad=True); up = torch.randn(b, q, k, generator=g)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
e = scores.additive(Q, K, wq, wk, v) if mode == "naive" else chunked_additive_scores(Q @ wq.T, K @ wk.T, v)
(e * up).sum().backward()
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    for n, dflt in (("b", 32), ("q", 200), ("k", 200), ("d", 256), ("da", 256)):
        ap.add_argument(f"--{n}", type=int, default=dflt)
    ap.add_argument("--threads", default="2", help="comma-separated thread counts, interleaved (e.g. 2,1)")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    c = _chunk(a.b, a.q, a.k, a.da, None, DEFAULT_MAX_ELEMS)
    res = {(t, m): [] for t in threads for m in ("naive", "chunked")}
    for _ in range(a.repeats):
        for t, mode in res:
            argv = [sys.executable, "-c", CHILD, mode, *(str(x) for x in (a.b, a.q, a.k, a.d, a.da, t))]
            res[t, mode].append(json.loads(subprocess.check_output(argv).decode().strip().splitlines()[-1]))
    med = {key: {k: statistics.median(r[k] for r in rs) for k in ("s", "mb")} for key, rs in res.items()}
    print(f"b={a.b} q={a.q} k={a.k} d={a.d} d_a={a.da}, forward+backward, median of {a.repeats}, "
          f"chunks of {c} queries ({-(-a.q // c)} blocks)")
    for t in threads:
        print(f" {t} thread(s)")
        for m in ("naive", "chunked"):
            r = med[t, m]
            runs = ", ".join(f"{x['s']:.2f}" for x in res[t, m])
            print(f"  {m:8s} {r['s']:.2f} s  peak +{r['mb']:.0f} MB   (runs: {runs} s)")
        n, ch = med[t, "naive"], med[t, "chunked"]
        print(f"  memory chunked/naive {ch['mb'] / n['mb']:.3f} (target <= 0.25); "
              f"time chunked/naive {ch['s'] / n['s']:.2f} (target <= 1.3)")


if __name__ == "__main__":
    main()
