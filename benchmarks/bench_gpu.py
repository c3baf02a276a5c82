"""attnlab against PyTorch on one device, side by side: the contract's cost where engineers run.

    python benchmarks/bench_gpu.py                       # CUDA, the full sizes (about 2 minutes on an H200)
    python benchmarks/bench_gpu.py --device cpu          # the same rows at small sizes

Each row times attnlab and its reference alternately in one process (median of ``--repeat`` runs
after warm-up; CUDA events on CUDA) and reports the ratio reference / attnlab for speed rows
(1.0 = as fast; higher is faster) or attnlab / reference for the weights row (lower is better).
Writes ``--out`` (JSON) and prints a Markdown table for benchmarks/RESULTS.md.

Rows (sizes on CUDA; the CPU divides the lengths):
  causal fwd / fwd+bwd    attention(causal=True)      vs SDPA is_causal             b4 h16 n4096 d64 bf16
  decode                  1 query over 4096 keys       vs SDPA                       causal=True
  decode, left padding    1 query, (b, 1, 1, k) mask   vs SDPA with the same mask
  padding fwd             (b, 1, 1, k) bool mask       vs SDPA with the same mask
  need_weights            need_weights=True, n 2048    vs matmul-softmax-matmul      (time ratio, lower is better)
  MHA causal inference    nn.MultiHeadAttention        vs torch.nn.MultiheadAttention dim 1024 n 2048 b 8
  varlen                  varlen_attention             vs flex with a document mask 8 documents, 12,288 tokens
  window 1M fwd+bwd       block_sparse_attention       time and peak memory         w 256 h 8 d 64 n 1,048,576
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import attnlab
from attnlab import patterns
from attnlab.kernels import block_sparse_attention, varlen_attention


class Clock:
    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, fn: Callable[[], object]) -> float:
        """Seconds of one call."""
        if self.device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            torch.cuda.synchronize()
            return start.elapsed_time(stop) / 1e3
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t


def side_by_side(clock: Clock, ours: Callable[[], object], ref: Callable[[], object], repeat: int, warm: int = 3):
    for _ in range(warm):
        ours(), ref()
    a, b = [], []
    for _ in range(repeat):  # alternate, so that drift hits both
        a.append(clock(ours))
        b.append(clock(ref))
    return statistics.median(a), statistics.median(b)


def _qkv(b, h, q, k, d, dtype, device, grad=False):
    g = torch.Generator(device="cpu").manual_seed(0)
    make = lambda n: torch.randn(b, h, n, d, generator=g).to(device, dtype).requires_grad_(grad)  # noqa: E731
    return make(q), make(k), make(k)


def rows(device: torch.device, dtype: torch.dtype, scale: int, repeat: int, big: bool) -> list[dict]:
    clock, out = Clock(device), []
    n = 4096 // scale

    def add(name, ours, ref, what="speed", **extra):
        t_ours, t_ref = side_by_side(clock, ours, ref, repeat)
        ratio = t_ref / t_ours if what == "speed" else t_ours / t_ref
        out.append({"row": name, "attnlab_ms": t_ours * 1e3, "reference_ms": t_ref * 1e3, "ratio": ratio,
                    "ratio_is": "reference/attnlab" if what == "speed" else "attnlab/reference", **extra})
        print(f"{name:28s} attnlab {t_ours * 1e3:9.3f} ms  reference {t_ref * 1e3:9.3f} ms  ratio {ratio:.3f}",
              flush=True)

    with torch.no_grad():
        q, k, v = _qkv(4, 16, n, n, 64, dtype, device)
        add("causal fwd", lambda: attnlab.attention(q, k, v, causal=True),
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), goal=0.95)
        q1 = q[:, :, -1:].contiguous()
        add("decode (1 query, causal)", lambda: attnlab.attention(q1, k, v, causal=True),
            lambda: F.scaled_dot_product_attention(q1, k, v), goal=0.9)
        real = torch.ones(4, 1, 1, n, dtype=torch.bool, device=device)
        for i in range(4):
            real[i, ..., : i * n // 8] = False  # left padding, a different amount per sequence
        add("decode, left padding", lambda: attnlab.attention(q1, k, v, mask=real),
            lambda: F.scaled_dot_product_attention(q1, k, v, attn_mask=real), goal=0.9)
        add("padding fwd", lambda: attnlab.attention(q, k, v, mask=real),
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=real), goal=0.9)
        qw, kw, vw = _qkv(4, 16, n // 2, n // 2, 64, dtype, device)

        def naive():
            s = (qw @ kw.transpose(-1, -2)) * (64 ** -0.5)
            return torch.softmax(s.float(), -1).to(qw.dtype) @ vw

        add("need_weights", lambda: attnlab.attention(qw, kw, vw, need_weights=True), naive, what="time", goal=1.3)

    qg, kg, vg = _qkv(4, 16, n, n, 64, dtype, device, grad=True)
    grad = torch.randn_like(qg)

    def fwd_bwd(fn):
        def run():
            o = fn()
            o = o[0] if isinstance(o, tuple) else o
            torch.autograd.grad(o, (qg, kg, vg), grad)
        return run

    add("causal fwd+bwd", fwd_bwd(lambda: attnlab.attention(qg, kg, vg, causal=True)),
        fwd_bwd(lambda: F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)), goal=0.95)

    dim, nm = 1024, 2048 // scale
    ours = attnlab.nn.MultiHeadAttention(dim, 16).to(device, dtype).eval()
    theirs = torch.nn.MultiheadAttention(dim, 16, batch_first=True).to(device, dtype).eval()
    with torch.no_grad():
        x = torch.randn(8, nm, dim, device=device, dtype=dtype)
        tri = torch.ones(nm, nm, dtype=torch.bool, device=device).triu(1)  # torch: True = masked
        add("MHA causal inference", lambda: ours(x, causal=True),
            lambda: theirs(x, x, x, attn_mask=tri, is_causal=True, need_weights=False), goal=1.0)
        _varlen(add, device, dtype, scale)
    out.extend(_window(device, dtype, big))
    return out


def _varlen(add, device, dtype, scale) -> None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    lengths = [2048 // scale] * 4 + [1024 // scale] * 4  # 8 documents
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(total, 16, 64, generator=g).to(device, dtype) for _ in range(3))
    doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).to(device)
    bm = create_block_mask(lambda b, h, i, j: doc[i] == doc[j], None, None, total, total, device=str(device))
    flex = torch.compile(flex_attention) if device.type == "cuda" else flex_attention
    qt, kt, vt = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    docs = attnlab.Mask.documents(cu)  # built once, as flex's block mask is: it keeps the kernel's plan
    add("varlen (8 documents)", lambda: varlen_attention(q, k, v, docs), lambda: flex(qt, kt, vt, block_mask=bm),
        goal=0.9)


def _window(device: torch.device, dtype: torch.dtype, big: bool) -> list[dict]:
    n = 1 << 20 if big else (1 << 14 if device.type == "cuda" else 1 << 12)
    pattern = patterns.sliding_window(256)
    q, k, v = _qkv(1, 8, n, n, 64, dtype, device, grad=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def once() -> float:
        t = time.perf_counter()
        out, _ = block_sparse_attention(q, k, v, pattern)
        torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    first, again = once(), once()  # the first call builds (and caches) the block mask
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    row = {"row": f"window w=256 n={n} fwd+bwd", "first_call_s": first, "cached_call_s": again, "peak_gib": peak}
    print(f"{row['row']:28s} first call {first:.2f} s (block mask built), cached call {again:.3f} s, peak {peak:.2f} GiB",
          flush=True)
    return [row]


def table(results: list[dict]) -> str:
    lines = ["| row | attnlab (ms) | reference (ms) | ratio | goal |", "|---|---:|---:|---:|---|"]
    for r in results:
        if "ratio" in r:
            sign = "≥" if r["ratio_is"] == "reference/attnlab" else "≤"
            met = (r["ratio"] >= r["goal"]) if sign == "≥" else (r["ratio"] <= r["goal"])
            lines.append(f"| {r['row']} | {r['attnlab_ms']:.3f} | {r['reference_ms']:.3f} | {r['ratio']:.2f} "
                         f"({r['ratio_is']}) | {sign} {r['goal']}: {'met' if met else 'not met'} |")
        else:
            lines.append(f"| {r['row']} | first {r['first_call_s']:.2f} s, cached {r['cached_call_s']:.3f} s | "
                         f"peak {r['peak_gib']:.2f} GiB | | runs on one GPU |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", default="gpu_results.json")
    ap.add_argument("--no-big", action="store_true", help="skip the 1,048,576-token window (CUDA only)")
    args = ap.parse_args()
    device = torch.device(args.device)
    cpu = device.type == "cpu"
    dtype = torch.float32 if cpu else torch.bfloat16
    results = rows(device, dtype, scale=32 if cpu else 1, repeat=3 if cpu else args.repeat,
                   big=not cpu and not args.no_big)
    meta = {"device": torch.cuda.get_device_name() if not cpu else "cpu", "torch": torch.__version__,
            "dtype": str(dtype), "repeat": 3 if cpu else args.repeat}
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
