"""``attnlab experiment bottleneck``: none vs bahdanau vs luong, quality against source length.

    attnlab experiment bottleneck              # the default size (≤ 10 min on 2 cores)
    attnlab experiment bottleneck --quick      # seconds: a smoke run
    attnlab experiment bottleneck --models none,bahdanau,luong,transformer   # the Transformer beside them
"""

from __future__ import annotations

import argparse

from ._fields import add_outputs, preset
from ._threads import apply_threads


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bottleneck", help="the fixed-vector bottleneck against attention, by source length",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--data", help="dataset (default numbers-en-zh)")
    p.add_argument("--steps", type=int, help="training steps per model")
    p.add_argument("--n", type=int, help="numbers in all splits")
    p.add_argument("--seed", type=int, default=0, help="the seed of the data and the models (default 0)")
    p.add_argument("--models", help="comma-separated, from none,bahdanau,luong,transformer (default none,bahdanau,luong)")
    add_outputs(p, "runs/bottleneck", "table.md, results.json, bottleneck.png", run,
                threads="torch threads (default 1: small RNN steps run fastest so)")


def run(args: argparse.Namespace) -> int:

    from ..experiments.bottleneck import MODEL_NAMES, BottleneckConfig, table
    from ..experiments.bottleneck import run as run_experiment
    from ._errors import UsageError

    apply_threads(args)
    if args.models is not None:
        models = tuple(m.strip() for m in args.models.split(",") if m.strip())
        bad = [m for m in models if m not in MODEL_NAMES]
        if bad or not models or len(set(models)) != len(models):
            raise UsageError(f"--models takes distinct names from {','.join(MODEL_NAMES)}; got {args.models!r}")
    cfg = preset(BottleneckConfig, args, seed=args.seed, data=args.data, steps=args.steps, n=args.n,
                 decoders=None if args.models is None else models)
    results = run_experiment(cfg, args.out, progress=not args.quiet)
    print(table(results), end="")
    secs = ", ".join(f"{d} {r['seconds']:.1f} s" for d, r in results["models"].items())
    print(f"(exact match % / chrF on the test split by source length; training+eval: {secs}; written to {args.out})")
    return 0
