"""``attnlab pretrained list | info NAME | path NAME | recipe NAME``: the models that ship trained.

    attnlab pretrained list                  # the names, one per line
    attnlab pretrained info de-en            # the model card: data, licence, recipe, scores, failure modes
    attnlab pretrained path caption          # the model's folder (weights, config, vocabularies, card)
    attnlab pretrained recipe de-en          # the command that trained it

Every verb that runs a trained model takes ``--pretrained NAME`` where it takes
``--checkpoint DIR``: ``attnlab translate --pretrained de-en "Guten Morgen."``.
``attnlab train --recipe NAME --out DIR`` trains the same model again (later flags override
the recipe's: ``--steps 200`` for a short run).
"""

from __future__ import annotations

import argparse
import shlex

ACTIONS = ("list", "info", "path", "recipe")


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("pretrained", help=help, description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=ACTIONS, help="list the names; info, path or recipe of one")
    p.add_argument("name", nargs="?", help="a shipped model (info, path, recipe)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import pretrained
    from ._errors import UsageError

    if args.action == "list":
        if args.name:
            raise UsageError(f"pretrained list takes no name; got {args.name!r}")
        print("\n".join(pretrained.names()))
        return 0
    if not args.name:
        raise UsageError(f"pretrained {args.action} needs a model name: {', '.join(pretrained.names())}")
    if args.action == "info":
        print(pretrained.info_text(args.name))
    elif args.action == "path":
        print(pretrained.folder(args.name))
    else:
        print("attnlab " + shlex.join(pretrained.recipe(args.name)))
    return 0

