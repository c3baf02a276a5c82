"""seq2seq training throughput of this checkout against another commit's code, side by side.

    git archive <commit> src | tar -x -C /tmp/base      # the reference: that commit's package
    .venv/bin/python benchmarks/bench_seq2seq_speedup.py --base /tmp/base/src [--steps 10] [--rounds 5]

Each round runs one subprocess per checkout (PYTHONPATH = that ``src``), alternating which goes
first, each training the ``attnlab train seq2seq`` default model (numbers-de-en, BiGRU encoder,
emb 64, hidden 128, attn_dim 128, batch 64; Bahdanau unless ``--decoder``) for ``--steps`` steps from
the same seed with ``attnlab.train.loop.train``, which reports target tokens/s over the training
steps only. Prints each run, then the medians and their ratio (this ÷ base).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import sys, torch
from attnlab.data import build_corpus, load_dataset
from attnlab.models import Seq2Seq, Seq2SeqConfig
from attnlab.train.loop import TrainConfig, train
torch.set_num_threads({threads})
c = build_corpus(load_dataset("numbers-de-en", n=4000))
torch.manual_seed(0)
m = Seq2Seq(Seq2SeqConfig(src_vocab=len(c.src_vocab), tgt_vocab=len(c.tgt_vocab), decoder="{decoder}"))
r = train(m, c.train, [], TrainConfig(steps={steps}, batch_size=64, eval_every=0, save_every=0, log_every=1000),
          progress=False)
print(r.tokens_per_s, r.train_loss)
"""


def run(src: str, a) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": str(a.threads)}
    code = CHILD.format(threads=a.threads, decoder=a.decoder, steps=a.steps)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    rate, loss = out.stdout.split()[-2:]
    return float(rate), float(loss)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the reference checkout's src folder")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--decoder", default="bahdanau")
    a = ap.parse_args()
    this = str(Path(__file__).resolve().parents[1] / "src")
    rates: dict[str, list[float]] = {"base": [], "this": []}
    for i in range(a.rounds):
        order = [("base", a.base), ("this", this)]
        for name, src in order if i % 2 == 0 else order[::-1]:
            rate, loss = run(src, a)
            rates[name].append(rate)
            print(f"round {i + 1} {name:4s} {rate:8,.0f} target tokens/s  (loss after {a.steps} steps {loss:.4f})",
                  flush=True)
    base, new = statistics.median(rates["base"]), statistics.median(rates["this"])
    print(f"{a.decoder}, batch 64, {a.steps} steps, {a.threads} thread(s), median of {a.rounds} interleaved rounds")
    print(f"  base {base:,.0f}  this {new:,.0f}  this / base {new / base:.2f}")


if __name__ == "__main__":
    main()
