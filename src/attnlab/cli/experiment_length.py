"""``attnlab experiment length``: BLEU and chrF against sentence length on real sentences, with and without attention.

    attnlab experiment length            # ding-de-en, none / bahdanau / luong, 1,500 steps each
    attnlab experiment length --quick    # seconds: a smoke run

Needs Debian's trans-de-en dictionary (the Makefile installs it when run as root).
"""

from __future__ import annotations

import argparse

from ._fields import add_outputs, preset
from ._threads import apply_threads
from ._types import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("length", help="BLEU and chrF by source length on ding-de-en, with and without attention",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--steps", type=positive_int, help="training steps per model (default 1500)")
    p.add_argument("--resamples", type=positive_int, help="bootstrap resamples (default 200)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the data and the models (default 0)")
    add_outputs(p, "runs/length", "table.md, results.json, length.png", run)


def run(args: argparse.Namespace) -> int:
    from ..experiments.length import LengthConfig, table
    from ..experiments.length import run as run_experiment

    apply_threads(args)
    cfg = preset(LengthConfig, args, seed=args.seed, steps=args.steps, resamples=args.resamples)
    results = run_experiment(cfg, args.out, progress=not args.quiet)
    print(table(results), end="")
    label = "smoke-run figures (--quick): too small to read anything into; " if args.quick else ""
    secs = ", ".join(f"{d} {r['seconds']:.0f} s" for d, r in results["models"].items())
    print(f"({label}test split by source length; training + decoding: {secs}; written to {args.out})")
    return 0
