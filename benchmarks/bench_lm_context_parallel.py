"""Training the character GPT on windows split across processes, against one process.

    python benchmarks/bench_lm_context_parallel.py --block-size 16384 65536 --steps 2

For each window length n it runs, one after the other on the same machine,

* one process:        ``python -m attnlab train lm --block-size n ...``
* two gloo processes: ``torchrun --nproc-per-node 2 -m attnlab train lm --context-parallel 2 --block-size n ...``

(one thread each, batch 1, 2 layers, 2 heads of 64 features, zigzag ring) and reports each run's wall
time, its peak resident memory per process (``ru_maxrss`` of the children: the largest process), the
peak of a run at n = 256 as the processes' fixed cost, and the losses both wrote, which must agree.
The text is generated (deterministic words), so nothing is downloaded. Writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _text(chars: int) -> str:
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far", "away", "home", "again"]
    out, n = [], 0
    while n < chars:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str]) -> dict:
    """Run ``cmd`` in a fresh child of a fresh Python (so ru_maxrss counts only its processes)."""
    probe = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(json.dumps({'rc': r.returncode, 'seconds': time.perf_counter() - t, "
             "'peak_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 'err': r.stderr[-2000:]}))")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "131072"}
    r = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if got["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{got['err']}")
    return got


def _losses(out: Path) -> list[float]:
    return [r["train_loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r]


def measure(n: int, steps: int, work: Path) -> dict:
    text = work / f"text-{n}.txt"
    text.write_text(_text(3 * n))
    args = ["train", "lm", "--text", str(text), "--block-size", str(n), "--batch-size", "1", "--dim", "128",
            "--num-heads", "2", "--num-layers", "2", "--steps", str(steps), "--eval-every", "0", "--eval-batches", "1",
            "--device", "cpu", "--threads", "1"]
    one = _run([sys.executable, "-m", "attnlab", *args, "--out", str(work / f"one-{n}")])
    two = _run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_port()),
                "-m", "attnlab", *args, "--context-parallel", "2", "--out", str(work / f"two-{n}")])
    l1, l2 = _losses(work / f"one-{n}"), _losses(work / f"two-{n}")
    return {"n": n, "one": {k: one[k] for k in ("seconds", "peak_mib")}, "two": {k: two[k] for k in ("seconds", "peak_mib")},
            "losses_one": l1, "losses_two": l2}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-size", type=int, nargs="+", default=[16384])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = measure(256, 1, Path(tmp))
        rows = [measure(n, a.steps, Path(tmp)) for n in a.block_size]
    print(f"fixed cost (n = 256): one process {base['one']['peak_mib']:.0f} MiB, each of two {base['two']['peak_mib']:.0f} MiB")
    print("| n | one process: peak MiB | two processes: peak MiB per process | ratio | ratio above the n = 256 cost "
          "| one process s | two processes s | final loss one / two |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p1, p2 = r["one"]["peak_mib"], r["two"]["peak_mib"]
        above = (p2 - base["two"]["peak_mib"]) / max(1e-9, p1 - base["one"]["peak_mib"])
        print(f"| {r['n']:,} | {p1:,.0f} | {p2:,.0f} | {p2 / p1:.2f} | {above:.2f} | {r['one']['seconds']:.1f} "
              f"| {r['two']['seconds']:.1f} | {r['losses_one'][-1]:.4f} / {r['losses_two'][-1]:.4f} |")
    if a.json:
        tmp = a.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fixed": base, "rows": rows,
                                   "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1))
        tmp.replace(a.json)


if __name__ == "__main__":
    main()
