"""Block-sparse kernel against dense masked SDPA, compiled flex_attention and dense SDPA (CPU).

    .venv/bin/python benchmarks/bench_sparse.py [--sizes 4096 16384 65536] [--repeats 2] [--threads 1]
        [--budget-gib 12] [--dense-max 16384] [--dense-bwd-max 16384] [--no-flex]

b=1, h=8, d=64, fp32; sliding window w=256 each side at every n, plus a
Longformer (window + 64 global tokens) and a BigBird (window + global + 2
random 64-blocks per row) pattern at n=16384, forward and forward+backward.
Every (pattern, n, mode, method) runs in its own subprocess: one warm-up
call, then ``--repeats`` timed calls (median), and the subprocess's peak RSS
(VmHWM, torch included) is that configuration's memory. The methods of one
configuration run back to back, so they see the same machine load. Dense
baselines whose estimated memory exceeds ``--budget-gib`` are skipped
("skipped: needs ~X GiB"); dense ones beyond ``--dense-max`` (forward) or
``--dense-bwd-max`` (forward+backward) are not run for time (minutes per call
on a shared machine). flex_attention's compile time (its first call) is
reported apart; its backward on the CPU raises, and the row says what it raised.
One thread for every method by default: on a shared, oversubscribed machine
each OpenMP parallel region waits for descheduled threads.
The fp32 GEMM rate (torch.mm 2048×2048) is measured in the same run (at its start and end; the
higher one counts), and the
kernel's rate is counted on the FLOPs of its non-empty 64-tiles (4·B²·d per
tile and head forward; 14·B²·d forward+backward, with the recomputed scores).
Prints a Markdown table, writes benchmarks/sparse_results.json and benchmarks/sparse_scaling.png.
"""


from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention, plan

B_, H, D, W, BLOCK = 1, 8, 64, 256, 64
HERE = Path(__file__).resolve().parent


def pattern(name: str, n: int):
    win = P.sliding_window(W)
    if name == "window":
        return win
    glob = win | P.global_tokens(range(64))
    return glob if name == "longformer" else glob | P.random_blocks(2, 64, seed=0)


def flex_mask_mod(name: str, n: int):
    lay = P.random_blocks(2, 64, seed=0).layout_for(n) if name == "bigbird" else None

    def mod(b, h, q, kv):
        ok = (kv - q >= -W) & (kv - q <= W)
        if name != "window":
            ok = ok | (q < 64) | (kv < 64)
        if lay is not None:
            ok = ok | lay[q // 64, kv // 64]
        return ok

    return mod


_FLEX: dict = {}


def make_runner(method: str, name: str, n: int, backward: bool):
    """A zero-argument callable running one call (and its backward) of `method`."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B_, H, n, D, requires_grad=backward) for _ in range(3))
    if method == "kernel":
        pat = pattern(name, n)
        plan(pat, n, BLOCK, B_ * H)  # built once and cached, like a compiled mask

        def call():
            return block_sparse_attention(q, k, v, pat, block=BLOCK)[0]
    elif method == "sdpa_masked":
        mask = pattern(name, n).materialize(n)  # (n, n) bool

        def call():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    elif method == "sdpa_dense":

        def call():
            return F.scaled_dot_product_attention(q, k, v)
    elif method == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if "fn" not in _FLEX:
            _FLEX["fn"] = torch.compile(flex_attention, dynamic=False)
        bm = create_block_mask(flex_mask_mod(name, n), None, None, n, n, device="cpu")

        def call():
            return _FLEX["fn"](q, k, v, block_mask=bm)
    else:
        raise ValueError(method)

    def run():
        if backward:
            out = call()
            out.sum().backward()
        else:
            with torch.no_grad():
                call()

    return run


def estimate_gib(method: str, n: int, backward: bool) -> float:
    """Rough peak of a dense baseline. On the CPU, SDPA runs its fused flash kernel, with a mask too,
    forward and backward: no (b, h, n, n) tensor, but the (n, n) bool mask and float copies of it
    (~12 bytes per mask element with torch's own memory: 3.06 GiB measured at n=16384, fwd+bwd)."""
    if method == "sdpa_masked":
        return 12 * n * n / 2**30
    return 0.0


def child(method: str, name: str, n: int, backward: bool, threads: int, repeats: int) -> None:
    """Warm-up, `repeats` timed calls; print times and the peak RSS (VmHWM) as JSON."""
    torch.set_num_threads(threads)
    res: dict = {}
    t = time.perf_counter()
    try:
        run = make_runner(method, name, n, backward)
        run()
    except Exception as e:  # noqa: BLE001  (report what happened)
        res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    else:
        res["first_s"] = time.perf_counter() - t  # flex: compile + first call
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            run()
            ts.append(time.perf_counter() - t)
        res["time_s"] = statistics.median(ts)
        res["times"] = ts
    hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
    res["peak_gib"] = int(hwm.split()[1]) * 1024 / 2**30
    print(json.dumps(res))


def run_child(method, name, n, backward, threads, repeats) -> dict:
    cmd = [sys.executable, __file__, "--child", method, name, str(n), str(int(backward)), str(threads), str(repeats)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        return {"error": f"exit {res.returncode}: {res.stderr.strip().splitlines()[-1][:160] if res.stderr.strip() else ''}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def gemm_rate(repeats: int = 5) -> float:
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    a @ b
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t)
    return 2 * 2048**3 / statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--budget-gib", type=float, default=12.0, help="skip dense baselines estimated above this")
    ap.add_argument("--dense-bwd-max", type=int, default=16384, help="largest n for dense fwd+bwd baselines (time)")
    ap.add_argument("--dense-max", type=int, default=16384, help="largest n for dense forward baselines (time)")
    ap.add_argument("--flex-max", type=int, default=16384, help="largest n for flex_attention (compile + time)")
    ap.add_argument("--from-json", action="store_true", help="only redraw the table and plot from sparse_results.json")
    args = ap.parse_args()
    if args.from_json:
        rows = json.loads((HERE / "sparse_results.json").read_text())
        table(rows)
        plot(rows)
        return
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}")
    gemm = gemm_rate()
    print(f"fp32 GEMM rate (torch.mm 2048²): {gemm / 1e9:.1f} GFLOP/s")
    rows = []
    configs = [("window", n) for n in args.sizes] + [("longformer", 16384), ("bigbird", 16384)]
    for name, n in configs:
        pl = plan(pattern(name, n), n, BLOCK, B_ * H)
        tile_flops = pl.nnz_blocks * BLOCK * BLOCK * D * H * B_
        for backward in (False, True):
            methods, notes = ["kernel"], []
            for m in ("sdpa_masked", "sdpa_dense"):
                if m == "sdpa_dense" and name != "window":
                    continue  # pattern-independent: see the window row
                est = estimate_gib(m, n, backward)
                if est > args.budget_gib:
                    notes.append(f"{m} skipped: needs ~{est:.0f} GiB (budget {args.budget_gib:.0f})")
                elif n > (args.dense_bwd_max if backward else args.dense_max):
                    notes.append(f"{m} not run: minutes per call at this n (time budget)")
                else:
                    methods.append(m)
            if not args.no_flex and n <= args.flex_max:
                methods.append("flex")
            res = {}
            for m in methods:
                reps = args.repeats if (n <= 16384 and m != "sdpa_masked" or n <= 4096) else 1
                res[m] = run_child(m, name, n, backward, args.threads, reps)
                if "error" in res[m]:
                    notes.append(f"{m} {'fwd+bwd' if backward else 'fwd'} failed: {res[m]['error']}")
                print(name, n, "fwd+bwd" if backward else "fwd", m, json.dumps(res[m]))
                sys.stdout.flush()
            times = {m: r["time_s"] for m, r in res.items() if "time_s" in r}
            flops = tile_flops * (14 if backward else 4)
            row = {
                "pattern": name, "n": n, "mode": "fwd+bwd" if backward else "fwd",
                "repeats": {m: len(r.get("times", [])) for m, r in res.items()},
                "density": pl.allowed / n**2, "times": times,
                "flex_compile_s": res.get("flex", {}).get("first_s"),
                "kernel_gflops": flops / times["kernel"] / 1e9 if "kernel" in times else None,
                "gemm_gflops": gemm / 1e9, "notes": notes,
                "peak_gib": {m: r["peak_gib"] for m, r in res.items() if "time_s" in r},
            }
            rows.append(row)
            (HERE / "sparse_results.json").write_text(json.dumps(rows, indent=1))
    gemm_end = gemm_rate()
    print(f"fp32 GEMM rate again at the end: {gemm_end / 1e9:.1f} GFLOP/s; the % column uses the higher one")
    for row in rows:
        row["gemm_gflops"] = max(gemm, gemm_end) / 1e9
        row["gemm_gflops_start_end"] = [gemm / 1e9, gemm_end / 1e9]
    (HERE / "sparse_results.json").write_text(json.dumps(rows, indent=1))
    table(rows)
    plot(rows)


def table(rows) -> None:
    print("\n| pattern | n | mode | kernel s | masked SDPA s | ×faster | flex s (compile s) | ×flex | dense SDPA s | kernel GFLOP/s (% GEMM) | peak GiB kernel / masked / flex / dense |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t, pk = r["times"], r["peak_gib"]

        def f(x, fmt="{:.3f}"):
            return "—" if x is None else fmt.format(x)

        km, fl = t.get("sdpa_masked"), t.get("flex")
        comp = f" ({r['flex_compile_s']:.0f})" if r["flex_compile_s"] else ""
        print(
            f"| {r['pattern']} | {r['n']} | {r['mode']} | {t['kernel']:.3f} | {f(km)} | "
            f"{f(km and km / t['kernel'], '{:.1f}×')} | {f(fl)}{comp} | {f(fl and fl / t['kernel'], '{:.2f}×')} | "
            f"{f(t.get('sdpa_dense'))} | {r['kernel_gflops']:.0f} ({100 * r['kernel_gflops'] / r['gemm_gflops']:.0f} %) | "
            + " / ".join(f(pk.get(m), "{:.2f}") for m in ("kernel", "sdpa_masked", "flex", "sdpa_dense"))
            + " |"
        )
    for r in rows:
        for note in r["notes"]:
            print(f"* {r['pattern']} n={r['n']} {r['mode']}: {note}")


def plot(rows) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install attnlab[viz]); no plot")
        return
    win = [r for r in rows if r["pattern"] == "window"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for mode, style in (("fwd", "-"), ("fwd+bwd", "--")):
        rs = [r for r in win if r["mode"] == mode]
        for m, label in (("kernel", "block-sparse window (O(n·w))"), ("sdpa_masked", "dense masked SDPA (O(n²))")):
            pts = [(r["n"], r["times"][m], r["peak_gib"].get(m)) for r in rs if m in r["times"]]
            if not pts:
                continue
            axes[0].plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"{label}, {mode}")
            mem = [p for p in pts if p[2] is not None]
            if mem:
                axes[1].plot([p[0] for p in mem], [p[2] for p in mem], style, marker="o", label=f"{label}, {mode}")
    for ax, yl in zip(axes, ("time (s)", "peak RSS (GiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(yl)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("b=1, h=8, d=64, fp32, window 256 each side (CPU)")
    fig.tight_layout()
    fig.savefig(HERE / "sparse_scaling.png", dpi=110)
    print(f"wrote {HERE / 'sparse_scaling.png'}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), bool(int(sys.argv[5])), int(sys.argv[6]), int(sys.argv[7]))
    else:
        main()
