"""Per-call cost on tiny inputs: attnlab against SDPA with the same mask, this thread's CPU time.

    .venv/bin/python benchmarks/bench_per_call.py [--calls 2000] [--rounds 7] [--json OUT]
    .venv/bin/python benchmarks/bench_per_call.py --before DIR   # also runs DIR/src (an older checkout) in a
                                                                # second process, for a before/after table

Inputs: b 1, h 2, n 16, d 8, float32, one thread (``torch.set_num_threads(1)``), no gradient. This is
the regime of decoding and small batches, where the time a call spends *around* the kernel shows. Each
case alternates attnlab and SDPA call by call in one process (blocks of ``--calls`` calls each, over
``--rounds`` rounds; the figure is the median round) and reports µs per call and the ratio
attnlab ÷ SDPA (lower is better; 1.0 = no overhead). Cases:

* ``no mask``: ``attention(q, k, v)`` against ``sdpa(q, k, v)``;
* ``decoding``: one query over a cache of 16 keys with ``causal=True`` (nothing is masked);
* ``causal``: q = k = 16, ``causal=True`` against ``is_causal=True``;
* ``padding``: a (b, 1, 1, k) bool padding mask (raw tensor) against SDPA with that mask;
* ``padding (Mask)``: the same padding as an ``attnlab.Mask`` built once (``Mask.padding(lengths, k)``);
* ``causal (Mask)``: ``Mask.causal(16, 16)`` built once;
* ``MultiHeadAttention``: dim 64, 4 heads, 16 tokens, against ``torch.nn.MultiheadAttention`` with the
  same weights (both ``need_weights=False``).

``--before DIR`` runs the raw-tensor cases with the attnlab of ``DIR/src`` in a child process (the same
script, the same machine, right after this one) and prints both tables side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F


def _time(fn, calls: int) -> float:
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls / 1e3  # µs per call


def _pair(ours, theirs, calls: int, rounds: int) -> tuple[float, float]:
    for fn in (ours, theirs):
        _time(fn, max(calls // 10, 10))  # warm-up
    a, b = [], []
    for _ in range(rounds):
        a.append(_time(ours, calls))
        b.append(_time(theirs, calls))
    return statistics.median(a), statistics.median(b)


def _cases(with_mask_value: bool) -> dict:
    import attnlab

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g) for _ in range(3))
    q1 = q[:, :, -1:]
    pad = torch.ones(1, 1, 1, 16, dtype=torch.bool)
    pad[..., 12:] = False
    cases = {
        "no mask": (lambda: attnlab.attention(q, k, v), lambda: F.scaled_dot_product_attention(q, k, v)),
        "decoding": (lambda: attnlab.attention(q1, k, v, causal=True),
                     lambda: F.scaled_dot_product_attention(q1, k, v)),
        "causal": (lambda: attnlab.attention(q, k, v, causal=True),
                   lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        "padding": (lambda: attnlab.attention(q, k, v, mask=pad),
                    lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=pad)),
    }
    if with_mask_value:
        padding = attnlab.Mask.padding([12], 16)
        causal = attnlab.Mask.causal(16, 16)
        cases["padding (Mask)"] = (lambda: attnlab.attention(q, k, v, mask=padding),
                                   lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=pad))
        cases["causal (Mask)"] = (lambda: attnlab.attention(q, k, v, mask=causal),
                                  lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.manual_seed(0)
    ours = attnlab.nn.MultiHeadAttention(64, 4).eval()
    from attnlab.nn.convert import to_torch

    theirs = to_torch(ours).eval()
    x = torch.randn(1, 16, 64)
    cases["MultiHeadAttention"] = (lambda: ours(x), lambda: theirs(x, x, x, need_weights=False))
    return cases


def run(calls: int, rounds: int, with_mask_value: bool) -> list[dict]:
    torch.set_num_threads(1)
    rows = []
    with torch.no_grad():
        for name, (ours, theirs) in _cases(with_mask_value).items():
            a, b = _pair(ours, theirs, calls, rounds)
            rows.append({"case": name, "attnlab_us": round(a, 2), "reference_us": round(b, 2), "ratio": round(a / b, 2)})
    return rows


def _table(rows: list[dict], before: list[dict] | None) -> str:
    old = {r["case"]: r for r in before or []}
    head = "| call | attnlab µs | reference µs | ratio |" + (" before: ratio |" if before else "")
    lines = [head, "|---|---:|---:|---:|" + ("---:|" if before else "")]
    for r in rows:
        prev = old.get(r["case"])
        tail = (f" {prev['ratio']:.2f} |" if prev else " – |") if before else ""
        lines.append(f"| {r['case']} | {r['attnlab_us']:.1f} | {r['reference_us']:.1f} | {r['ratio']:.2f} |{tail}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the rows as JSON here")
    ap.add_argument("--before", help="an older checkout whose src/ is measured too (raw-tensor cases)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import attnlab

    rows = run(args.calls, args.rounds, with_mask_value=hasattr(attnlab, "Mask") and not args.child)
    if args.child:
        print(json.dumps(rows))
        return
    before = None
    if args.before:
        env = {**os.environ, "PYTHONPATH": os.path.join(args.before, "src")}
        out = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls), "--rounds",
                              str(args.rounds)], env=env, capture_output=True, text=True, check=True).stdout
        before = json.loads(out.strip().splitlines()[-1])
    print(f"torch {torch.__version__}, one thread, b 1, h 2, n 16, d 8; ratio = attnlab ÷ reference")
    print(_table(rows, before))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"after": rows, "before": before}, f, indent=1)


if __name__ == "__main__":
    main()
