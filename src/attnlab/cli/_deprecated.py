"""Old spellings of flags, kept working for one release.

Every verb spells the same thing the same way: ``--num-layers``, ``--num-heads``, ``--dim``,
``--positional``, ``--out``, ``--picture``, ``--text``, ``--checkpoint``, ``--precision`` (the
vocabulary table of docs/cli.md). ``caption``'s ``--lang`` (the captions' language, not the
walkthrough's) is ``--caption-lang`` there, the one old spelling that is not one everywhere.
A verb that used another spelling keeps it as an alias for one release: ``deprecated_alias(parser, "--layers", "--num-layers")`` after the
canonical flag is added. The alias stores into the canonical flag's ``dest`` (the same value,
converted and checked the same way), is hidden from ``--help``, and prints one line on stderr:

    attnlab train seq2seq: note: --layers is deprecated; use --num-layers
"""

from __future__ import annotations

import argparse
import sys

# old spelling → canonical one, across all verbs (what tests/cli/test_one_flag_vocabulary.py checks)
OLD_SPELLINGS = {"--layers": "--num-layers", "--heads": "--num-heads", "--pos": "--positional",
                 "--d-model": "--dim", "--plot": "--picture", "--prompt": "--text", "--output": "--out",
                 "--run": "--checkpoint", "--dtype": "--precision"}


class _Deprecated(argparse.Action):
    """Parses like ``target`` (its nargs, type, choices), notes the new name, then acts as ``target``."""

    def __init__(self, option_strings, dest, target: argparse.Action, **kw):
        super().__init__(option_strings, dest, nargs=target.nargs, const=target.const, default=argparse.SUPPRESS,
                         type=target.type, choices=target.choices, metavar=target.metavar, help=argparse.SUPPRESS)
        self.target = target
        # the new name, as the note gives it: the flag's first long spelling (--out, not -o)
        self.new = next((o for o in target.option_strings if o.startswith("--")), target.option_strings[0])

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is deprecated; use {self.new}",
              file=sys.stderr)
        self.target(parser, namespace, values, option_string)


def deprecated_alias(container, old: str, new: str) -> None:
    """Accept ``old`` as a hidden, noted spelling of the already added flag ``new`` of ``container``
    (a parser or one of its argument groups)."""
    target = container._option_string_actions[new]
    container.add_argument(old, dest=target.dest, action=_Deprecated, target=target)


__all__ = ["deprecated_alias", "OLD_SPELLINGS"]
