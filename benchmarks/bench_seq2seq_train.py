"""Training throughput (target tokens/s) of the Seq2Seq decoders on numbers-de-en.

    .venv/bin/python benchmarks/bench_seq2seq_train.py [--steps 30] [--repeats 3]

The model of ``attnlab train seq2seq``'s defaults (emb 64, hidden 128,
BiGRU encoder, attn_dim 128, batch 64); the Bahdanau model is the figure quoted
in docs/classic.md, the none decoder (no attention) is the reference measured in the
same run, interleaved, median.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from attnlab.data import build_corpus, load_dataset
from attnlab.models import Seq2Seq, Seq2SeqConfig
from attnlab.train.loop import TrainConfig, train


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = build_corpus(load_dataset("numbers-de-en", n=4000))
    rates = {"bahdanau": [], "luong": [], "none": []}
    for _ in range(a.repeats):
        for dec in rates:
            torch.manual_seed(0)
            m = Seq2Seq(Seq2SeqConfig(src_vocab=len(c.src_vocab), tgt_vocab=len(c.tgt_vocab), decoder=dec))
            r = train(m, c.train, [], TrainConfig(steps=a.steps, batch_size=64, eval_every=0, save_every=0), progress=False)
            rates[dec].append(r.tokens_per_s)
    print(f"numbers-de-en (char source, word target), batch 64, {a.steps} steps, median of {a.repeats}, {a.threads} thread(s)")
    for dec, v in rates.items():
        print(f"  {dec:9s} {statistics.median(v):,.0f} target tokens/s")
    print(f"  bahdanau / none {statistics.median(rates['bahdanau']) / statistics.median(rates['none']):.2f}")


if __name__ == "__main__":
    main()
