"""Context-parallel attention against one process: peak memory per rank and time (CPU, gloo).

    .venv/bin/python benchmarks/bench_context_parallel.py [--n 65536] [--heads 2] [--dim 64] [--world 2] [--repeats 2]

One sequence of n tokens (b = 1, h heads, d = 64, fp32), forward (inference, no autograd):

* ``window``: sliding window w = 256 each side. One process: attnlab's block-sparse kernel on the
  whole sequence. W processes: ``context_parallel_attention(mode="ring")`` on the contiguous layout
  (each rank exchanges only a halo of 256 keys with its neighbours, then runs the same kernel).
* ``causal``: full causal attention. One process: SDPA (``is_causal``, the fused flash kernel). W
  processes: ring attention, zigzag layout, the fused flash kernel per block, merged by log-sum-exp.

Each configuration runs in fresh processes (one thread each). Memory is the peak RSS of the
process (VmHWM) minus its RSS just before the attention call (torch and the inputs already
loaded), so it counts what the attention itself needed. The one-process run holds the whole
q, k, v; a rank holds its n/W share. Time: the median of ``--repeats`` calls, the slowest rank.
On a 2-core machine W = 2 processes use both cores while the one-process run uses one thread:
the time ratio is parallel speed-up plus communication, not a like-for-like kernel comparison.
Prints a Markdown table and writes benchmarks/context_parallel_results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:  # Linux: writing 5 to clear_refs resets VmHWM to the current RSS
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _inputs(n: int, h: int, d: int):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, h, n, d, generator=g) for _ in range(3)]


def _measure(fn, repeats: int) -> tuple[float, float]:
    """(median seconds, peak MiB above the RSS before the first call)."""
    _reset_peak()
    before = _rss_kib("VmRSS:")
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), (_rss_kib("VmHWM:") - before) / 1024


def single(kind: str, n: int, h: int, d: int, repeats: int) -> dict:
    from attnlab import patterns as P
    from attnlab.kernels import block_sparse_attention

    torch.set_num_threads(1)
    q, k, v = _inputs(n, h, d)
    with torch.no_grad():
        if kind == "window":
            fn = lambda: block_sparse_attention(q, k, v, P.sliding_window(256))  # noqa: E731
        else:
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        sec, mib = _measure(fn, repeats)
    return {"seconds": sec, "peak_mib": mib}


def _rank(rank, world, port, kind, n, h, d, repeats, results):
    import torch.distributed as dist

    from attnlab import patterns as P
    from attnlab.distributed import context_parallel_attention, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    layout = "contiguous" if kind == "window" else "zigzag"
    q, k, v = (shard(t, layout=layout).contiguous() for t in _inputs(n, h, d))
    kw = dict(pattern=P.sliding_window(256)) if kind == "window" else dict(causal=True)
    with torch.no_grad():
        def fn():
            context_parallel_attention(q, k, v, mode="ring", layout=layout, **kw)
            dist.barrier()
        fn()  # warm-up (and the same work on every rank before timing)
        sec, mib = _measure(fn, repeats)
    results[rank] = {"seconds": sec, "peak_mib": mib}
    dist.destroy_process_group()


def parallel(kind: str, n: int, h: int, d: int, world: int, repeats: int) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.get_context("spawn").Manager() as m:
        results = m.dict()
        mp.start_processes(_rank, args=(world, port, kind, n, h, d, repeats, results), nprocs=world, join=True,
                           start_method="spawn")
        per = [results[r] for r in range(world)]
    return {"seconds": max(r["seconds"] for r in per), "peak_mib": max(r["peak_mib"] for r in per)}


def _single_in_subprocess(kind, n, h, d, repeats) -> dict:
    import subprocess

    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_context_parallel as b; "
            f"print(json.dumps(b.single({kind!r}, {n}, {h}, {d}, {repeats})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "context_parallel_results.json"))
    args = ap.parse_args()
    rows = []
    for kind in ("window", "causal"):
        one = _single_in_subprocess(kind, args.n, args.heads, args.dim, args.repeats)
        many = parallel(kind, args.n, args.heads, args.dim, args.world, args.repeats)
        rows.append({"pattern": kind, "one": one, "parallel": many})
        print(f"{kind}: one process {one}, {args.world} processes {many}", file=sys.stderr)
    print(f"| pattern (n = {args.n:,}, h = {args.heads}, d = {args.dim}) | one process: s | MiB | "
          f"{args.world} ranks: s | MiB per rank | memory ratio | time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        o, p = r["one"], r["parallel"]
        print(f"| {r['pattern']} | {o['seconds']:.2f} | {o['peak_mib']:.0f} | {p['seconds']:.2f} | {p['peak_mib']:.0f} | "
              f"{p['peak_mib'] / max(o['peak_mib'], 1e-9):.2f} | {p['seconds'] / o['seconds']:.2f} |")
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
