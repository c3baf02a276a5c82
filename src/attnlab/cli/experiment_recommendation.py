"""``attnlab experiment recommendation``: mean pooling, a GRU, DIN's target attention and SASRec
on next-item recommendation (generated histories whose cause of each item is known).

    attnlab experiment recommendation            # the default size (2,000 users, 3 seeds; about 36 min)
    attnlab experiment recommendation --quick    # under a minute on one thread
"""

from __future__ import annotations

import argparse
import sys

from ._fields import add_outputs, preset
from ._threads import apply_threads
from ._types import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recommendation", help="next-item hit rate and NDCG: mean pooling, GRU, DIN, SASRec",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small version that runs in under a minute")
    p.add_argument("--seeds", type=positive_int, help="seeds per model (default 3)")
    p.add_argument("--steps", type=positive_int, help="training steps per run (default 2000)")
    add_outputs(p, "runs/recommendation", "table.md and results.json", run)


def run(args: argparse.Namespace) -> int:
    from ..experiments.recommendation import RecommendationConfig, table
    from ..experiments.recommendation import run as run_experiment

    apply_threads(args)
    cfg = preset(RecommendationConfig, args, seeds=args.seeds, steps=args.steps)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr))
    results = run_experiment(cfg, args.out, progress=log)
    print(table(results), end="")
    label = "smoke-run figures (--quick): small, read with care" if args.quick else "figures"
    print(f"({label}: held-out next item ranked among {cfg.eval_negatives} unseen items, mean ± 95 % CI over "
          f"{cfg.seeds} seeds; weight on the cause: attention on the history item that caused the held-out one; "
          f"{results['seconds']:.0f} s; written to {args.out})")
    return 0
