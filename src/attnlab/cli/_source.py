"""Where a verb's trained model comes from: ``--checkpoint DIR`` or ``--pretrained NAME``.

Every verb that runs a trained model takes either; ``--pretrained`` names a model that
ships inside attnlab (``attnlab pretrained list``) and stands for its folder, so the verb
reads ``args.checkpoint`` (or its ``dest``) the same way for both.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def pretrained_folder(name: str) -> str:
    """``--pretrained NAME`` → the shipped model's folder; an unknown name lists the names."""
    from ..pretrained import UnknownModel, folder

    try:
        return str(folder(name))
    except UnknownModel as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_model_source(p: argparse.ArgumentParser, what: str, *, flag: str = "--checkpoint", dest: str = "checkpoint",
                     required: bool = True, group=None, pretrained: str = "") -> None:
    """``flag DIR`` (what: the folder it expects) or ``--pretrained NAME``, one of them; in ``group``
    (a verb's own mutually exclusive sources) when given. ``pretrained``: its help, if not the default."""
    g = group if group is not None else p.add_mutually_exclusive_group(required=required)
    g.add_argument(flag, dest=dest, metavar="DIR", help=what)
    g.add_argument("--pretrained", dest=dest, type=pretrained_folder, metavar="NAME",
                   help=pretrained or "a trained model that ships with attnlab instead (attnlab pretrained list)")


def check_hf_source(args: argparse.Namespace) -> None:
    """``--hf DIR`` with ``--text``: the folder exists and there is a text to run the model on."""
    from ._errors import UsageError

    if args.text is None:
        raise UsageError("--hf needs --text: the text to run the model on")
    if not Path(args.hf).is_dir():
        raise UsageError(f"no such model folder: {args.hf}")
