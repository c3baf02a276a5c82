"""``attnlab explain [MECHANISM] [--example NAME | --file FILE.toml] [--lang en|zh] [--format text|markdown|json]``.

MECHANISM may be left out with ``--example`` or ``--file`` (the example names
it); it is spelled either way (``multi_head`` or ``multi-head``).

A step-by-step walkthrough: every recorded step with its formula and numbers,
then the example's written claims, each exact, rounding drift or wrong.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..explain import builtin_names, document, load, render, render_markdown, run, verify
from ..explain.i18n import LANGS
from ..explain.mechanisms import MECHANISMS, canonical
from . import VERBS, UsageError
from ._threads import add_threads

FORMATS = {
    "text": lambda ex, t, v, a: render(ex, t, v, digits=a.digits, lang=a.lang),
    "markdown": lambda ex, t, v, a: render_markdown(ex, t, v, digits=a.digits, lang=a.lang),
    "json": lambda ex, t, v, a: json.dumps(document(ex, t, v, lang=a.lang), ensure_ascii=False, indent=1) + "\n",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help=VERBS["explain"],
        description="Compute a worked example with attnlab and print every step: "
        "scores, weights, context, each with its formula and numbers. "
        "Claims written in the example are checked against the computed values.",
    )
    p.add_argument("mechanism", nargs="?", help=f"one of: {', '.join(sorted(MECHANISMS))} (other spellings accepted: multi_head, additive, latent); "
                   "optional with --example or --file")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--example", help="a built-in example (see --list)")
    src.add_argument("--file", help="a worked-example TOML file")
    p.add_argument("--digits", type=int, default=4, help="decimals shown (default 4)")
    p.add_argument("--lang", choices=LANGS, default="en", help="language of the walkthrough (default en)")
    p.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default text)")
    p.add_argument("--list", action="store_true", help="list the built-in examples and exit")
    add_threads(p)
    p.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    if args.list:
        for name in builtin_names():
            ex = load(name)
            print(f"{name:<30} {ex.mechanism:<16} {ex.title}")
        return 0
    if not (0 <= args.digits <= 12):
        raise UsageError(f"--digits must be between 0 and 12; got {args.digits}")
    mechanism = canonical(args.mechanism) if args.mechanism else None
    if mechanism is not None and mechanism not in MECHANISMS:
        raise UsageError(f"unknown mechanism {args.mechanism!r}; known: {', '.join(sorted(MECHANISMS))}")
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UsageError(f"--file {args.file}: " + ("is a folder, not a file" if path.is_dir() else "no such file"))
        ex = load(path)
    elif args.example:
        ex = load(args.example)
    elif mechanism is not None:
        choices = [n for n in builtin_names() if load(n).mechanism == mechanism]
        if not choices:
            raise UsageError(f"no built-in example for {mechanism!r}; pass --file FILE.toml")
        ex = load(choices[0])
    else:
        raise UsageError("give a MECHANISM (e.g. 'additive'), --example NAME or --file FILE.toml; --list shows the examples")
    if mechanism is not None and ex.mechanism != mechanism:
        raise UsageError(f"{ex.name} is a {ex.mechanism!r} example, not {mechanism!r}")
    trace = run(ex)
    print(FORMATS[args.format](ex, trace, verify(ex, trace), args), end="")
    return 0
