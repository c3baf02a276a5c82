"""The ``attnlab`` command: ``attnlab <verb> ...``.

Each verb lives in its own module under ``attnlab.cli`` with two functions:
``add_parser(subparsers)`` (which registers the verb and sets ``func``) and
the function it runs. Add a verb by adding its module name to ``VERBS``.
Errors the user can fix (bad files, bad arguments) are ``UsageError`` or
``ValueError``: they print one line ``attnlab: error: ...`` and exit 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

VERBS = ["explain", "verify", "view", "train", "experiment", "translate", "evaluate", "generate", "caption"]


class UsageError(Exception):
    """An error in what the user asked for; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab", description="Attention mechanisms, computed step by step and fast."
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb in VERBS:
        importlib.import_module(f"{__name__}.{verb}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except (UsageError, ValueError, FileNotFoundError) as e:
        print(f"attnlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnlab: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
