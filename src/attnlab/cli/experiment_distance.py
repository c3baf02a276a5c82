"""``attnlab experiment distance``: RNNs against self-attention as the cue moves away.

    attnlab experiment distance            # the default size (GRU, LSTM, attention; k = 4…256; 3 seeds)
    attnlab experiment distance --quick    # seconds: a smoke run
"""

from __future__ import annotations

import argparse
import sys

from ._fields import add_outputs, preset
from ._threads import apply_threads
from ._types import positive_int, positive_int_list


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distance", help="accuracy and gradients against distance: GRU, LSTM, self-attention",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--distances", type=positive_int_list, help="comma-separated distances k (default 4,16,64,256)")
    p.add_argument("--seeds", type=positive_int, help="seeds per model and distance (default 3)")
    p.add_argument("--steps", type=positive_int, help="training steps per run (default 300)")
    add_outputs(p, "runs/distance", "table.md, results.json, distance.png", run)


def run(args: argparse.Namespace) -> int:
    from ..experiments.distance import DistanceConfig, table
    from ..experiments.distance import run as run_experiment

    apply_threads(args)
    cfg = preset(DistanceConfig, args, distances=args.distances, seeds=args.seeds, steps=args.steps)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr))
    results = run_experiment(cfg, args.out, progress=log)
    print(table(results), end="")
    label = "smoke-run figures (--quick): too small to read anything into" if args.quick else "figures"
    print(f"({label}: test accuracy % mean ± 95 % CI over {cfg.seeds} seeds; {results['seconds']:.0f} s; "
          f"written to {args.out})")
    return 0
