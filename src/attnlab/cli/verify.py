"""``attnlab verify FILE...``: check every claim of worked examples (exit 0 only when none is wrong).

Each claim is exact, rounding drift, another convention (truncated, percent, 0-based
index, transposed), another step's value, or wrong (rules: ``attnlab.explain.verify``).
A FILE is a TOML path or a built-in example's name; ``--all`` checks every
built-in example.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._errors import UsageError
from ._static import constant
from ._threads import add_threads


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser(
        "verify",
        help=help,
        description="Recompute each worked example with attnlab and classify every written claim as "
        "exact (right at its written precision), rounding drift (right from the example's own rounded "
        "values), another convention (truncated, rounded up or down, percentages, a 0-based index, a transposed "
        "matrix), another step's value (e.g. raw scores written as scaled) or wrong (with the true value and "
        "the earlier wrong claim that changes it). Exit code 0 only when no claim is wrong or another step's.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="worked-example TOML files or built-in example names")
    p.add_argument("--all", action="store_true", help="verify every built-in example")
    p.add_argument("--digits", type=int, default=4, help="decimals shown (default 4)")
    p.add_argument("--lang", choices=constant("explain.i18n", "LANGS"), default="en",
                   help="language of the walkthrough's verdicts (default en)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="output format (default text)")
    p.add_argument("--quiet", "-q", action="store_true", help="one line per file")
    add_threads(p)
    p.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    from ..explain import builtin_names, document, load, run, verify
    from ..explain.i18n import t as say
    from ..explain.render_text import render_claims, summary

    names = list(args.files) + (builtin_names() if args.all else [])
    if not names:
        raise UsageError("give one or more FILEs (TOML paths or built-in names), or --all")
    wrong, docs = 0, []
    for name in names:
        if name.endswith(".toml") and not Path(name).is_file():
            raise UsageError(f"{name}: " + ("is a folder, not a file" if Path(name).is_dir() else "no such file"))
        ex = load(name)
        trace = run(ex)
        verdicts = verify(ex, trace)
        wrong += sum(not v.ok for v in verdicts)
        if args.format == "json":
            doc = document(ex, trace, verdicts, lang=args.lang)
            docs.append({k: doc[k] for k in ("example", "mechanism", "claims", "summary", "ok")})
        elif args.quiet:
            print(say(args.lang, "verify_file", name=ex.name, summary=summary(verdicts, args.lang)))
        else:
            print(ex.name + render_claims(verdicts, args.digits, args.lang)[0])
            print("\n".join(render_claims(verdicts, args.digits, args.lang)[1:]))
            print()
    if args.format == "json":
        print(json.dumps(docs, ensure_ascii=False, indent=1))
    return 1 if wrong else 0
