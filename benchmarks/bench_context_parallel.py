"""Context-parallel attention against one process: peak memory per rank and time (CPU, gloo).

    .venv/bin/python benchmarks/bench_context_parallel.py [--n 65536] [--heads 2] [--dim 64] [--world 2] [--repeats 2]
                                                          [--backward] [--patterns window causal]

One sequence of n tokens (b = 1, h heads, d = 64, fp32), forward (inference, no autograd), or with
``--backward`` forward + backward (q, k, v require gradients; the backward of ``out.sum()``):

* ``window``: sliding window w = 256 each side. One process: attnlab's block-sparse kernel on the
  whole sequence. W processes: ``context_parallel_attention(mode="ring")`` on the contiguous layout
  (each rank exchanges only a halo of 256 keys with its neighbours, then runs the same kernel).
* ``causal``: full causal attention. One process: SDPA (``is_causal``, the fused flash kernel). W
  processes: ring attention, zigzag layout, the fused flash kernel per block, merged by log-sum-exp.

Each configuration runs in fresh processes (one thread each). Memory is the peak RSS of the
process (VmHWM) over the ``--repeats`` calls minus its RSS just before the first (torch and the
inputs already loaded), so it counts what the attention itself needed, gradients included. Before
it, one call on a short sequence (n = 2,048) pays the one-time costs (gloo's connections, allocator
arenas), and glibc's ``MALLOC_MMAP_THRESHOLD_`` is fixed at 128 KiB (unless set) so that freed
large buffers leave the RSS (otherwise the heap keeps them, and what a call needs depends on
what ran before it). The one-process run holds the whole q, k, v; a rank holds its n/W share.
Time: the median of the ``--repeats`` calls, the slowest rank (memory: the largest rank's).
On a 2-core machine W = 2 processes use both cores while the one-process run uses one thread:
the time ratio is parallel speed-up plus communication, not a like-for-like kernel comparison.
Prints a Markdown table and writes benchmarks/context_parallel_results.json: the forward run under
"args" and "rows", a forward + backward run under "backward", "n=<n>" (each run keeps the others).
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


WARM_N = 2048  # the warm-up call's sequence length (a window of 256 takes the halo path on up to 8 ranks)


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


def _call(attend, inputs, backward: bool):
    """One timed call: ``attend(q, k, v)`` → out, without autograd, or with its backward."""
    if not backward:
        with torch.no_grad():
            attend(*inputs)
        return
    for t in inputs:
        t.grad = None
    attend(*inputs).sum().backward()


def single(kind: str, n: int, h: int, d: int, repeats: int, backward: bool = False) -> dict:
    from attnlab import patterns as P
    from attnlab.kernels import block_sparse_attention

    torch.set_num_threads(1)
    if kind == "window":
        attend = lambda q, k, v: block_sparse_attention(q, k, v, P.sliding_window(256))[0]  # noqa: E731
    else:
        attend = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    _call(attend, [t.requires_grad_(backward) for t in _inputs(WARM_N, h, d)], backward)  # warm-up
    q, k, v = (t.requires_grad_(backward) for t in _inputs(n, h, d))
    sec, mib = _measure(lambda: _call(attend, (q, k, v), backward), repeats)
    return {"seconds": sec, "peak_mib": mib}


def _rank(rank, world, port, kind, n, h, d, repeats, backward, results):
    import torch.distributed as dist

    from attnlab import patterns as P
    from attnlab.distributed import context_parallel_attention, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    layout = "contiguous" if kind == "window" else "zigzag"
    kw = dict(pattern=P.sliding_window(256)) if kind == "window" else dict(causal=True)

    def fn(inputs):
        _call(lambda q, k, v: context_parallel_attention(q, k, v, mode="ring", layout=layout, **kw)[0], inputs,
              backward)
        dist.barrier()

    fn([shard(t, layout=layout).contiguous().requires_grad_(backward) for t in _inputs(WARM_N, h, d)])  # warm-up
    q, k, v = (shard(t, layout=layout).contiguous().requires_grad_(backward) for t in _inputs(n, h, d))
    sec, mib = _measure(lambda: fn((q, k, v)), repeats)
    results[rank] = {"seconds": sec, "peak_mib": mib}
    dist.destroy_process_group()


def parallel(kind: str, n: int, h: int, d: int, world: int, repeats: int, backward: bool = False) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.get_context("spawn").Manager() as m:
        results = m.dict()
        mp.start_processes(_rank, args=(world, port, kind, n, h, d, repeats, backward, results), nprocs=world, join=True,
                           start_method="spawn")
        per = [results[r] for r in range(world)]
    return {"seconds": max(r["seconds"] for r in per), "peak_mib": max(r["peak_mib"] for r in per)}


def _single_in_subprocess(kind, n, h, d, repeats, backward) -> dict:
    import subprocess

    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_context_parallel as b; "
            f"print(json.dumps(b.single({kind!r}, {n}, {h}, {d}, {repeats}, {backward})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--backward", action="store_true", help="forward + backward (default: forward without autograd)")
    ap.add_argument("--patterns", nargs="+", choices=("window", "causal"), default=["window", "causal"])
    ap.add_argument("--out", default=str(Path(__file__).parent / "context_parallel_results.json"))
    args = ap.parse_args()
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # read by the processes started below
    rows = []
    for kind in args.patterns:
        one = _single_in_subprocess(kind, args.n, args.heads, args.dim, args.repeats, args.backward)
        many = parallel(kind, args.n, args.heads, args.dim, args.world, args.repeats, args.backward)
        rows.append({"pattern": kind, "one": one, "parallel": many})
        print(f"{kind}: one process {one}, {args.world} processes {many}", file=sys.stderr)
    what = "forward + backward" if args.backward else "forward"
    print(f"| pattern, {what} (n = {args.n:,}, h = {args.heads}, d = {args.dim}) | one process: s | MiB | "
          f"{args.world} ranks: s | MiB per rank | memory ratio | time ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        o, p = r["one"], r["parallel"]
        print(f"| {r['pattern']} | {o['seconds']:.2f} | {o['peak_mib']:.0f} | {p['seconds']:.2f} | {p['peak_mib']:.0f} | "
              f"{p['peak_mib'] / max(o['peak_mib'], 1e-9):.2f} | {p['seconds'] / o['seconds']:.2f} |")
    _write(Path(args.out), {"args": vars(args), "rows": rows}, args.backward)


def _write(path: Path, run: dict, backward: bool) -> None:
    """This run into the results file, keeping the other mode's; written whole (temporary file, then renamed)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    if backward:
        data.setdefault("backward", {})[f"n={run['args']['n']}"] = run
    else:
        data.update(run)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
