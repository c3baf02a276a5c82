"""Cross-attention with the memory's keys and values cached, against projecting them at every step.

    .venv/bin/python benchmarks/bench_memory_cache.py [--source 256] [--tokens 64] [--repeats 5] [--threads 1]

An encoder-decoder ``attnlab.models.transformer.Transformer`` (dim 256, 8 heads, 3 encoder and
3 decoder layers, untrained) encodes one source of ``--source`` tokens and decodes
``--tokens`` tokens one at a time with the self-attention key/value cache (``KVCache``), once
with each layer's ``MemoryCache`` (the memory's K and V projected at the first step only) and
once with it switched off (K and V of the memory projected again at every step, what a decoder
without a cross-attention cache does). Both give the same logits (checked). Runs are
interleaved; figures are medians. Ratio = uncached time ÷ cached time.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.nn import KVCache, MemoryCache


class _NoMemoryCache(MemoryCache):
    """A memory cache that never hits: the memory is projected at every step."""

    def lookup(self, key, value):
        return None

    def store(self, key, value, kh, vh):
        pass


@torch.no_grad()
def decode(model, memory, tokens: int, use_memory_cache: bool) -> torch.Tensor:
    cache = KVCache(len(model.decoder))
    if not use_memory_cache:
        for layer in cache.layers:
            layer.memory = _NoMemoryCache()
    nxt = torch.zeros(memory.shape[0], 1, dtype=torch.long)
    logits = []
    for _ in range(tokens):
        step = model.decode(nxt, memory, cache=cache)[:, -1]  # (b, vocab)
        logits.append(step)
        nxt = step.argmax(-1, keepdim=True)
    return torch.stack(logits, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = TransformerConfig(src_vocab=100, tgt_vocab=100, dim=256, num_heads=8, num_encoder_layers=3,
                            num_decoder_layers=3, max_len=max(args.source, args.tokens) + 1)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        memory = model.encode(torch.randint(0, 100, (1, args.source)))
    decode(model, memory, 4, True), decode(model, memory, 4, False)  # warm-up
    times = {"cached": [], "uncached": []}
    outs = {}
    for _ in range(args.repeats):
        for name, use in (("cached", True), ("uncached", False)):
            start = time.perf_counter()
            outs[name] = decode(model, memory, args.tokens, use)
            times[name].append(time.perf_counter() - start)
    same = torch.allclose(outs["cached"], outs["uncached"], atol=1e-5, rtol=0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads {torch.get_num_threads()}")
    print("| source tokens | decoded tokens | memory cache s | no memory cache s | uncached ÷ cached | same logits |")
    print("|---|---|---|---|---|---|")
    print(f"| {args.source} | {args.tokens} | {med['cached']:.3f} | {med['uncached']:.3f} | "
          f"{med['uncached'] / med['cached']:.2f} | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
