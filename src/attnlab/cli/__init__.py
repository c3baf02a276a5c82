"""The ``attnlab`` command: ``attnlab <verb> ...``.

Each verb lives in its own module under ``attnlab.cli`` with two functions:
``add_parser(subparsers, help)`` (which registers the verb and sets ``func``) and
the function it runs. Add a verb by adding its name and one-line help to ``VERBS``
(``attnlab.cli._verbs``). Only the verb that runs is imported: ``attnlab --help``,
``--version`` and a mistyped verb import neither a verb module nor torch. The verbs
never import this module (their shared pieces are the private modules beside them),
so the arrows inside the package point one way.
Errors the user can fix (bad files, bad arguments, a missing optional package)
print one line ``attnlab VERB: error: ...`` and exit 2, never a traceback; a closed
pipe (``attnlab evaluate ... | head``) ends quietly; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ._errors import UsageError
from ._verbs import VERBS

# Optional packages → the extra that installs them.
EXTRAS = {"matplotlib": "viz", "sacrebleu": "lab", "num2words": "lab", "emoji": "vision",
          "transformers": "hf", "onnx": "onnx", "onnxruntime": "onnx", "onnxscript": "onnx", "mkdocs": "docs",
          "tensorboard": "tensorboard"}

# Errors whose message says what to fix: one line, exit 2.
USER_ERRORS = (UsageError, ValueError, OSError, RecursionError, MemoryError)


def _one_line(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "the input is nested too deeply to read (a file of thousands of nested lists or tables?)"
    if isinstance(e, MemoryError):
        return "not enough memory for this input; try smaller sizes"
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _missing_extra(e: ModuleNotFoundError) -> str | None:
    top = (e.name or "").split(".")[0]
    if top in EXTRAS:
        return f"this needs the optional package {top}: pip install 'attnlab[{EXTRAS[top]}]'"
    return None


class Parser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line on stderr (exit 2), without the usage block."""

    verb = ""  # the verb of the command line being parsed (set by ``main``), for its options' names
    task = ""  # and its second word: a group's task (``train seq2seq``), if it names one

    def error(self, message: str):  # type: ignore[override]
        prog, hint = self.prog, _close_choice(message)
        verb_parser = self._verb_parser()
        if verb_parser is not None:
            prog = verb_parser.prog
            if message.startswith("unrecognized arguments:"):
                hint = _did_you_mean(message.split(":", 1)[1].split(), verb_parser)
        self.exit(2, f"{prog}: error: {' '.join(message.split())} ({hint}see {prog} --help)\n")

    def _verb_parser(self) -> argparse.ArgumentParser | None:
        """The parser of the command line's verb, or of its task when the verb is a group."""
        parser: argparse.ArgumentParser | None = None
        for word in (self.verb, self.task) if self.verb else ():
            chosen = _subcommand(parser or self, word)
            if chosen is None:
                break
            parser = chosen
        return parser


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    subparsers = getattr(parser, "_subparsers", None)
    for action in subparsers._group_actions if subparsers is not None else ():
        choices = getattr(action, "choices", None) or {}
        if name in choices:
            return choices[name]
    return None


def _did_you_mean(given: list[str], parser: argparse.ArgumentParser) -> str:
    """"did you mean --example? " for a mistyped option, from the verb's own option names."""
    import difflib

    options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    close = [m for g in given if g.startswith("-") for m in difflib.get_close_matches(g.split("=")[0], options, n=1)]
    return f"did you mean {', '.join(close)}? " if close else ""


def _close_choice(message: str) -> str:
    """"did you mean explain? " for a mistyped verb, task or choice, from the choices argparse lists."""
    import difflib
    import re

    m = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", " ".join(message.split()))
    if m is None:
        return ""
    choices = [c.strip().strip("'") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=1)
    return f"did you mean {close[0]}? " if close else ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``attnlab`` parser. With ``only`` (a verb, or ``""`` for none) only that verb's module is
    imported; every other verb is its name and help, enough to list it and to refuse a typo."""
    parser = Parser(prog="attnlab", description="Attention mechanisms, computed step by step and fast.")
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for verb, help in VERBS.items():
        if only is None or verb == only:
            importlib.import_module(f"{__name__}.{verb.replace('-', '_')}").add_parser(sub, help)
        else:
            sub.add_parser(verb, help=help)
    return parser


def _verb(argv: Sequence[str]) -> str:
    """The verb of a command line: its first word (the top level has no option taking a value)."""
    return argv[0] if argv and argv[0] in VERBS else ""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"] and any(a == "--recipe" or a.startswith("--recipe=") for a in argv):
        from ..pretrained import with_recipe  # train --recipe NAME: the shipped model's own command

        try:
            argv = with_recipe(argv[1:])
        except ValueError as e:
            print(f"attnlab train: error: {e}", file=sys.stderr)
            return 2
    parser = build_parser(only=_verb(argv))
    if not argv:  # bare ``attnlab``: the verbs, as --help lists them
        parser.print_help()
        return 0
    if isinstance(parser, Parser):
        parser.verb = _verb(argv)
        parser.task = argv[1] if parser.verb and len(argv) > 1 else ""
    args = parser.parse_args(argv)
    verb = " ".join(str(getattr(args, k)) for k in ("verb", f"{args.verb}_task") if getattr(args, k, None))
    try:
        if hasattr(args, "threads"):  # every computing verb has --threads (unset: fewer on a busy machine)
            from ._threads import apply_threads

            apply_threads(args)
        code = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as Unix tools do. Point stdout at
        # devnull so Python's exit-time flush does not raise again (the docs' recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"attnlab {verb}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        hint = _missing_extra(e)
        if hint is None:
            raise
        print(f"attnlab {verb}: error: {hint}", file=sys.stderr)
        return 2
    except USER_ERRORS as e:
        print(f"attnlab {verb}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug of ours: still one line; ATTNLAB_DEBUG=1 shows the traceback
        if os.environ.get("ATTNLAB_DEBUG"):
            raise
        print(f"attnlab {verb}: internal error ({type(e).__name__}: {_one_line(e)}); "
              "rerun with ATTNLAB_DEBUG=1 for the traceback and please report it", file=sys.stderr)
        return 70
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
