"""Packed variable-length sequences (``varlen_attention``, block-sparse CPU kernel) against the padded batch.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_packed.py [--docs 64] [--repeats 5] [--block 64] [--threads 1] [--lognormal]

The documents: ``--docs`` sentence pairs drawn (seed 0) from the Ding German–English
dictionary (``attnlab.data.ding``, /usr/share/trans/de-en), each one character sequence
"German ||| English" as a packed seq2seq-LM sample would be; when that file is missing, lengths
from a log-normal (median 80, σ = 0.6, clipped to 8…512; also with ``--lognormal``) — the table
says which.
h = 8 heads, d = 64, fp32, one thread. Both sides compute the same outputs:

* **padded**: the batch (docs, h, L_max, d) through ``attnlab.attention`` with a (docs, 1, 1, L_max)
  key-padding mask (causal: and the causal mask), i.e. PyTorch's fused SDPA;
* **packed**: one row of Σ ℓ tokens through ``attnlab.kernels.varlen_attention``.

Times: median of ``--repeats`` calls after one warm-up, forward and forward+backward, the two
methods alternating so they see the same machine load. Memory: the bytes of q, k, v and the
output (what the layout stores; padding included) and the score elements each method's
kernel visits (docs·h·L_max² for the padded batch; the plan's non-empty B×B tiles·h for packed).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

from attnlab import attention
from attnlab.data import ding
from attnlab.kernels import plan
from attnlab.kernels.varlen import varlen_attention
from attnlab.patterns import documents

H, D = 8, 64


def doc_lengths(docs: int, seed: int, lognormal: bool = False) -> tuple[list[int], str]:
    rng = random.Random(seed)
    if ding.DEFAULT_PATH.exists() and not lognormal:
        pairs = ding.load_pairs()
        pick = rng.sample(pairs, docs)
        return [len(f"{de} ||| {en}") for de, en in pick], f"Ding sentence pairs ({len(pairs)} in the file)"
    return [min(512, max(8, round(rng.lognormvariate(4.382, 0.6)))) for _ in range(docs)], "log-normal (median 80, σ 0.6)"


def timed(fn, repeats: int) -> float:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lognormal", action="store_true", help="log-normal lengths (median 80, σ 0.6) even when Ding is there")
    ap.add_argument("--json", default=str(Path(__file__).resolve().parent / "packed_results.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    lengths, source = doc_lengths(args.docs, args.seed, args.lognormal)
    total, L, b = sum(lengths), max(lengths), len(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    packed = [torch.randn(total, H, D, requires_grad=True) for _ in range(3)]
    padded = [torch.zeros(b, H, L, D) for _ in range(3)]
    key_mask = torch.zeros(b, L, dtype=torch.bool)
    for i, (s, n) in enumerate(zip(cu[:-1].tolist(), lengths)):
        for dst, src in zip(padded, packed):
            dst[i, :, :n] = src.detach()[s : s + n].transpose(0, 1)
        key_mask[i, :n] = True
    padded = [t.requires_grad_() for t in padded]
    rows = []
    for causal in (False, True):
        mask = key_mask[:, None, None, :]

        def pad_fwd(mask=mask, causal=causal):
            with torch.no_grad():
                return attention(*padded, mask=mask, causal=causal)[0]

        def pack_fwd(causal=causal):
            with torch.no_grad():
                return varlen_attention(*packed, cu, causal=causal, block=args.block)[0]

        def pad_bwd(mask=mask, causal=causal):
            attention(*padded, mask=mask, causal=causal)[0].sum().backward()

        def pack_bwd(causal=causal):
            varlen_attention(*packed, cu, causal=causal, block=args.block)[0].sum().backward()

        # same numbers first (the real tokens)
        a, p = pad_fwd(), pack_fwd()
        err = max(float((p[s : s + n] - a[i, :, :n].transpose(0, 1)).abs().max()) for i, (s, n) in enumerate(zip(cu[:-1].tolist(), lengths)))
        times = {"padded_fwd": [], "packed_fwd": [], "padded_fwd_bwd": [], "packed_fwd_bwd": []}
        for _ in range(2):  # alternate, twice, so both see the same load
            times["padded_fwd"].append(timed(pad_fwd, args.repeats))
            times["packed_fwd"].append(timed(pack_fwd, args.repeats))
            times["padded_fwd_bwd"].append(timed(pad_bwd, max(1, args.repeats // 2)))
            times["packed_fwd_bwd"].append(timed(pack_bwd, max(1, args.repeats // 2)))
        t = {k: min(v) for k, v in times.items()}
        pl = plan(documents(lengths, causal), total, args.block, H)
        rows.append({
            "causal": causal,
            "max_abs_diff": err,
            **{k: round(v * 1e3, 2) for k, v in t.items()},
            "speedup_fwd": round(t["padded_fwd"] / t["packed_fwd"], 2),
            "speedup_fwd_bwd": round(t["padded_fwd_bwd"] / t["packed_fwd_bwd"], 2),
            "score_elements_padded": b * H * L * L,
            "score_elements_packed": pl.nnz_blocks * args.block**2 * H,
            "allowed_pairs": pl.allowed * H,
        })
    tensor_bytes = {"padded": 4 * b * H * L * D * 4, "packed": 4 * total * H * D * 4}
    result = {"source": source, "docs": b, "total_tokens": total, "max_len": L, "mean_len": round(total / b, 1),
              "block": args.block, "threads": args.threads, "h": H, "d": D, "qkvo_bytes": tensor_bytes, "rows": rows}
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{b} documents from {source}: lengths {min(lengths)}…{L} (mean {total / b:.0f}); "
          f"{total} packed tokens vs {b * L} padded ({b * L / total:.2f}×); h={H}, d={D}, block {args.block}, {args.threads} thread(s)")
    print("| mask | padded fwd ms | packed fwd ms | speed-up | padded fwd+bwd ms | packed fwd+bwd ms | speed-up | score elements padded / packed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {'causal' if r['causal'] else 'bidirectional'} | {r['padded_fwd']} | {r['packed_fwd']} | {r['speedup_fwd']}× | "
              f"{r['padded_fwd_bwd']} | {r['packed_fwd_bwd']} | {r['speedup_fwd_bwd']}× | "
              f"{r['score_elements_padded'] / r['score_elements_packed']:.2f}× |")
    print(f"q, k, v, output bytes: padded {tensor_bytes['padded'] / 2**20:.1f} MiB, packed {tensor_bytes['packed'] / 2**20:.1f} MiB "
          f"({tensor_bytes['padded'] / tensor_bytes['packed']:.2f}×); max |packed − padded| {max(r['max_abs_diff'] for r in rows):.1e}")


if __name__ == "__main__":
    main()
