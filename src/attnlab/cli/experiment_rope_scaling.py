"""``attnlab experiment rope-scaling``: validation loss at 128 … 1,024 characters for a character LM
trained at 128, with plain RoPE, linear / NTK / dynamic NTK / YaRN scaling, and ALiBi.

    attnlab experiment rope-scaling            # the default size (about 6 min on one shared core)
    attnlab experiment rope-scaling --quick    # seconds: a smoke run
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from ._fields import add_outputs
from ._threads import apply_threads


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rope-scaling", help="RoPE scaling methods and ALiBi beyond the trained context",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    p.add_argument("--steps", type=int, help="training steps per model")
    p.add_argument("--factor", type=float, help="the scaling factor s of every method (default 8 = 1024/128)")
    p.add_argument("--methods", help="comma-separated, from rope,linear,ntk,dynamic,yarn,llama3,longrope,alibi (default all)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the data and the models (default 0)")
    add_outputs(p, "runs/rope-scaling", "table.md, results.json, rope_scaling.png", run)


def run(args: argparse.Namespace) -> int:
    import time

    from ..experiments.rope_scaling import METHODS, RopeScalingConfig, table
    from ..experiments.rope_scaling import run as run_experiment
    from ._errors import UsageError

    apply_threads(args)
    cfg = RopeScalingConfig.quick() if args.quick else RopeScalingConfig()
    changes: dict = {"seed": args.seed}
    if args.steps is not None:
        if args.steps < 1:
            raise UsageError(f"--steps must be >= 1; got {args.steps}")
        changes["steps"] = args.steps
    if args.factor is not None:
        if args.factor < 1:
            raise UsageError(f"--factor must be >= 1; got {args.factor}")
        changes["factor"] = args.factor
    if args.methods is not None:
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        if not methods or any(m not in METHODS for m in methods) or len(set(methods)) != len(methods):
            raise UsageError(f"--methods takes distinct names from {','.join(METHODS)}; got {args.methods!r}")
        changes["methods"] = methods
    cfg = replace(cfg, **changes)
    t0 = time.perf_counter()
    results = run_experiment(cfg, args.out, progress=not args.quiet)
    print(table(results), end="")
    print(f"(validation loss, nats per character; {time.perf_counter() - t0:.0f} s in all; written to {args.out})")
    return 0
