"""The command reference page (``docs/cli.md``): every verb's and task's ``--help``, one section each.

The help is rendered at a fixed width (``WIDTH`` columns, whatever the terminal) with the options
written one way on every Python (``-o, --out OUT``), so the page is the same wherever it is built.
Regenerate it after changing a help text, a default or a choice:

    python -m attnlab.cli._reference > docs/cli.md      (or: make cli-reference)
"""

from __future__ import annotations

import argparse
import inspect

WIDTH = 100

INTRO = """\
# Command reference

<!-- Written by `python -m attnlab.cli._reference > docs/cli.md` (make cli-reference); do not edit by hand. -->

Every command of `attnlab` with what `--help` prints for it: the verbs, then each task of a verb
(`attnlab train seq2seq`, `attnlab experiment vision`, ...). Each option's default is in its help.

## One name for each thing

Every verb spells these the same way. An older spelling still works for one release, hidden from
`--help`, with a one-line note (`attnlab generate: note: --prompt is deprecated; use --text`).

| flag | what it is | where | older spelling |
|---|---|---|---|
| `--text` | the input text (or, for `train lm` and `interpret heads` on a GPT, a text file) | `explain`, `view`, `translate`, `generate`, `interpret`, `train lm` | `--prompt` (`generate`); `translate` also takes the texts as its last words |
| `--out` (`-o` where it is a file) | the file or folder a verb writes: a checkpoint, a page, a table | every verb that writes one | `--output` (`view`, `plot-run`) |
| `--checkpoint DIR` | a trained model's folder | every verb that reads one | `--run` (`interpret`, `experiment faithfulness`) |
| `--pretrained NAME` | a model that ships with attnlab, instead of `--checkpoint` | every verb that runs a trained model | |
| `--device`, `--precision` | where and in which precision a model runs (`fp32`, `bf16`; `check`: the inputs' precisions to try) | every verb that runs a model | `--dtype` (`check`) |
| `--lang` | the language of a walkthrough (`en`, `zh`) | `explain`, `verify` | |
| `--caption-lang` | the language of the captions | `caption`, `train caption` | `--lang` (`caption`, `train caption`) |
| `--num-layers`, `--num-heads`, `--dim`, `--positional` | a model's size and positions | `train` | `--layers`, `--heads`, `--d-model`, `--pos` |
| `--picture` | a PNG or SVG drawing, besides the text output | `translate`, `interpret`, `view` | `--plot` |
| `--threads` | torch's CPU threads | every verb that computes | |
| `--seed` | the seed of everything random | every verb with randomness | |
"""


class _Invocation:
    """Options listed as ``-o, --out OUT`` (the metavar once), as Python 3.13 and later write them."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)  # type: ignore[misc]
        if action.nargs == 0:
            return ", ".join(action.option_strings)
        metavar = self._format_args(action, self._get_default_metavar_for_optional(action))  # type: ignore[attr-defined]
        return ", ".join(action.option_strings) + " " + metavar


def command_help(parser: argparse.ArgumentParser, width: int = WIDTH) -> str:
    """What ``parser.format_help()`` prints, at ``width`` columns and without colours."""
    formatter_class = type("_Formatter", (_Invocation, parser.formatter_class), {})
    kwargs = {"color": False} if "color" in inspect.signature(formatter_class).parameters else {}
    formatter = formatter_class(prog=parser.prog, width=width, **kwargs)  # Python 3.14 colours help
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    formatter.add_text(parser.description)
    for group in parser._action_groups:
        formatter.start_section(group.title)
        formatter.add_text(group.description)
        formatter.add_arguments(group._group_actions)
        formatter.end_section()
    formatter.add_text(parser.epilog)
    return formatter.format_help()


def commands(parser: argparse.ArgumentParser):
    """Every (prog, parser) under ``parser``, in the order of ``--help``: the parser, then each sub-command's."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from commands(sub)


def reference_markdown() -> str:
    """The page: a title, a few lines on what it holds, then one section per command with its help."""
    from . import build_parser

    parts = [INTRO]
    for prog, parser in commands(build_parser()):
        text = command_help(parser).rstrip("\n")
        parts.append(f"\n## {prog}\n\n```text\n{text}\n```\n")
    return "".join(parts)


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.stdout.write(reference_markdown())
