"""attn_implementation="attnlab" against transformers' "sdpa" and "eager", side by side on the CPU.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_hf.py [--repeats 7] [--batch 4] [--tokens 512]
        [--kv-heads 4] [--padding none left]

A small random Llama (4 layers, dim 256, 4 heads of 64, MLP 1024, float32, eval, ``torch.no_grad``),
built from its configuration (nothing downloads), one set of weights for every implementation.
Two comparisons, each with the implementations interleaved (one call each per round, after a
warm-up) and medians taken:

* forward without weights: "attnlab" (the fused path) against "sdpa"; goal: attnlab ≤ 1.1 × sdpa;
* forward with ``output_attentions=True``: "attnlab" (weights from the same call) against "eager";
  goal: eager ÷ attnlab ≥ 1.3.

``--padding left``: half the rows are left-padded by a quarter of the tokens (a padding mask for
every implementation). The threads are set to one (``torch.set_num_threads(1)``): the figures are
single-core, and a shared machine's other jobs perturb them less.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaModel

import attnlab.integrations.transformers  # noqa: F401  (registers "attnlab")


def build(kv_heads: int) -> LlamaModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=2048)
    return LlamaModel(config).eval()


def inputs(batch: int, tokens: int, padding: str) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (batch, tokens), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, tokens, dtype=torch.long)
    if padding == "left":
        mask[: batch // 2, : tokens // 4] = 0
    return {"input_ids": ids, "attention_mask": mask}


def compare(model: LlamaModel, batch: dict, impls: list[str], weights: bool, repeats: int) -> dict[str, float]:
    """Median seconds of one forward per implementation, interleaved."""
    def call(impl: str) -> float:
        model.set_attn_implementation(impl)
        start = time.perf_counter()
        with torch.no_grad():
            out = model(**batch, output_attentions=weights)
        elapsed = time.perf_counter() - start
        assert (out.attentions is not None and len(out.attentions) == 4) if weights else True
        return elapsed

    for impl in impls:
        call(impl)  # warm-up
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for _ in range(repeats):
        for impl in impls:
            times[impl].append(call(impl))
    return {impl: statistics.median(t) for impl, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--kv-heads", type=int, nargs="+", default=[4, 1], help="key/value heads (4: no grouping)")
    p.add_argument("--padding", nargs="+", default=["none", "left"], choices=["none", "left"])
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {platform.processor() or platform.machine()}, "
          f"1 thread; batch {args.batch} × {args.tokens} tokens, medians of {args.repeats}")
    print("| kv heads | padding | sdpa ms | attnlab ms | attnlab ÷ sdpa (≤ 1.1) | eager + weights ms "
          "| attnlab + weights ms | eager ÷ attnlab (≥ 1.3) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for kv in args.kv_heads:
        model = build(kv)
        for padding in args.padding:
            batch = inputs(args.batch, args.tokens, padding)
            fast = compare(model, batch, ["sdpa", "attnlab"], False, args.repeats)
            slow = compare(model, batch, ["eager", "attnlab"], True, args.repeats)
            r1, r2 = fast["attnlab"] / fast["sdpa"], slow["eager"] / slow["attnlab"]
            print(f"| {kv} | {padding} | {1e3 * fast['sdpa']:.1f} | {1e3 * fast['attnlab']:.1f} | {r1:.3f}"
                  f"{'' if r1 <= 1.1 else ' (not met)'} | {1e3 * slow['eager']:.1f} | {1e3 * slow['attnlab']:.1f} | "
                  f"{r2:.3f}{'' if r2 >= 1.3 else ' (not met)'} |", flush=True)


if __name__ == "__main__":
    main()
