"""KV-cache bytes per token: multi-head latent attention (DeepSeek-V2) against MHA and GQA of the same width.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_latent_cache.py [--tokens 256]

dim = 1024, h = 16, d_h = 64, fp32, batch 1. Each module decodes ``--tokens`` tokens one at a time
(after a one-token prefill) into its cache; the bytes are read off the cached tensors
(``LayerCache.keys``/``values`` up to its length — its doubling buffer's spare capacity is not
counted — and ``LatentCache.c_kv``/``k_rope``) and divided by the tokens. MLA uses DeepSeek-V2's
ratios: d_c = 4·d_h, d_R = d_h / 2 (paper §2.1.2). Also prints DeepSeek-V2's own sizes (h = 128,
d_h = 128, d_c = 512, d_R = 64) from the formulas, per layer in bf16.
"""

from __future__ import annotations

import argparse

import torch

from attnlab.nn import LatentCache, LayerCache, MultiHeadAttention, MultiHeadLatentAttention

DIM, H, DH = 1024, 16, 64


@torch.no_grad()
def measure(module, cache, tokens: int) -> float:
    x = torch.randn(1, tokens, DIM)
    for t in range(tokens):
        module(x[:, t : t + 1], causal=True, cache=cache)
    if isinstance(cache, LayerCache):
        held = cache.keys.numel() * cache.keys.element_size() + cache.values.numel() * cache.values.element_size()
    else:
        held = cache.nbytes()
    return held / tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = [
        ("MHA (h = 16)", MultiHeadAttention(DIM, H, rope=True).eval(), LayerCache()),
        ("GQA (h_kv = 4)", MultiHeadAttention(DIM, H, num_kv_heads=4, rope=True).eval(), LayerCache()),
        ("GQA (h_kv = 2)", MultiHeadAttention(DIM, H, num_kv_heads=2, rope=True).eval(), LayerCache()),
        ("MQA (h_kv = 1)", MultiHeadAttention(DIM, H, num_kv_heads=1, rope=True).eval(), LayerCache()),
        ("MLA (d_c = 256, d_R = 32)", MultiHeadLatentAttention(DIM, H, kv_latent_dim=4 * DH, q_latent_dim=384, rope_dim=DH // 2).eval(), LatentCache()),
    ]
    base = None
    print(f"dim={DIM}, h={H}, d_h={DH}, fp32, {args.tokens} tokens decoded one at a time")
    print("| attention | cache bytes / token / layer | vs MHA |")
    print("|---|---:|---:|")
    for name, module, cache in rows:
        b = measure(module, cache, args.tokens)
        base = base or b
        print(f"| {name} | {b:,.0f} | {base / b:.1f}× smaller |" if b != base else f"| {name} | {b:,.0f} | 1× |")
    mha, mla = 2 * 128 * 128 * 2, (512 + 64) * 2
    print(f"DeepSeek-V2's sizes (formulas, bf16): MHA {mha:,} B, MLA {mla:,} B per token and layer ({mha / mla:.1f}× smaller)")


if __name__ == "__main__":
    main()
