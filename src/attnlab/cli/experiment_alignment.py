"""``attnlab experiment alignment``: AER of learned attention against manual Greek–English word alignments.

    attnlab experiment alignment            # Bahdanau and Luong, 2,000 steps each, vs diagonal and IBM Model 1
    attnlab experiment alignment --quick    # seconds: a smoke run

Needs the data of the PyPI package bible-alignments (``pip install --no-deps bible-alignments==0.4.2``;
the Makefile installs it).
"""

from __future__ import annotations

import argparse

from ._fields import add_outputs, preset
from ._threads import apply_threads
from ._types import fraction, positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alignment", help="alignment error rate of learned attention against gold word alignments",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--steps", type=positive_int, help="training steps per model (default 2000)")
    p.add_argument("--threshold", type=fraction, help="weight for the thresholded alignment (default 0.3)")
    p.add_argument("--source-form", choices=("lemma", "text"), help="Greek lemmas (default) or surface forms")
    p.add_argument("--seed", type=int, default=0, help="the seed of the data and the models (default 0)")
    add_outputs(p, "runs/alignment", "table.md, results.json and alignment.png", run)


def run(args: argparse.Namespace) -> int:
    from ..experiments.alignment import AlignmentConfig, table
    from ..experiments.alignment import run as run_experiment

    apply_threads(args)
    cfg = preset(AlignmentConfig, args, seed=args.seed, steps=args.steps, threshold=args.threshold,
                 source_form=args.source_form)
    results = run_experiment(cfg, args.out, progress=not args.quiet)
    print(table(results), end="")
    label = "smoke-run figures (--quick): too small to read anything into; " if args.quick else ""
    print(f"({label}AER % on {results['n_test']} held-out verses, lower is better; trained on {results['n_train']}; "
          f"{results['wall_seconds']:.0f} s; written to {args.out})")
    return 0
