"""Mutation score per package from ``mutmut results --all true`` (read on stdin).

    mutmut results --all true | python benchmarks/mutation_summary.py [--sample-of attnlab.nn.=3962 ...]

Prints one Markdown row per package (attnlab.functional, attnlab.masks, ...): killed / checked and
the score, then the same with the *display-text* mutants set apart, and the surviving mutants' names
below the table. mutmut names a mutant ``module.x_function__mutmut_N`` (or
``module.xǁClassǁmethod__mutmut_N``); mutants never checked are left out (a sampled run checks a
uniform random sample, ``mutation_sample.py``; its row then carries a 95 % Wilson interval).

Display text: a surviving mutant that changes only the Unicode formula, the LaTeX or the note of a
``record(name, formula, value, latex=..., note=...)`` trace call (the text a walkthrough prints next
to the numbers), found by comparing the mutant's function with the original in ``mutants/src``
with ``ast``. Those change what a learner reads, not any number; they are counted separately.
"""

from __future__ import annotations

import argparse
import ast
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

LINE = re.compile(r"\s*(\S+__mutmut_\d+): (.+?)\s*$")
TEXT_KEYWORDS = {"latex", "note"}


def package(name: str) -> str:
    """attnlab.nn.multihead.x_f__mutmut_3 -> attnlab.nn; a top-level module is its own row (attnlab.masks)."""
    module = re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]
    return ".".join(module.split(".")[:2])


def _functions(path: Path, cache: dict) -> dict[str, ast.AST]:
    if path not in cache:
        tree = ast.parse(path.read_text())
        cache[path] = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return cache[path]


def _record_text_only(a: ast.AST, b: ast.AST) -> bool:
    """True when a and b differ only in a record(...) call's formula / latex / note arguments."""
    if ast.dump(a) == ast.dump(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, ast.Call) and isinstance(b, ast.Call) and getattr(a.func, "id", None) == "record":
        if ast.dump(a.func) != ast.dump(b.func) or len(a.args) != len(b.args):
            return False
        if any(ast.dump(x) != ast.dump(y) for i, (x, y) in enumerate(zip(a.args, b.args)) if i != 1):
            return False
        ka = {k.arg: ast.dump(k.value) for k in a.keywords}
        kb = {k.arg: ast.dump(k.value) for k in b.keywords}
        return all(ka.get(k) == kb.get(k) for k in set(ka) | set(kb) if k not in TEXT_KEYWORDS)
    fa, fb = list(ast.iter_fields(a)), list(ast.iter_fields(b))
    for (na, va), (_, vb) in zip(fa, fb):
        if isinstance(va, list):
            if not isinstance(vb, list) or len(va) != len(vb):
                return False
            if not all(_record_text_only(x, y) if isinstance(x, ast.AST) else x == y for x, y in zip(va, vb)):
                return False
        elif isinstance(va, ast.AST):
            if not isinstance(vb, ast.AST) or not _record_text_only(va, vb):
                return False
        elif va != vb and na not in ("name",):
            return False
    return True


def display_only(name: str, root: Path, cache: dict) -> bool:
    """Does this mutant change only the display text of a trace record? (False when unsure.)"""
    module, func = re.match(r"(.+?)\.(x[_ǁ].+)$", name).groups()
    path = root / "src" / Path(*module.split(".")).with_suffix(".py")
    if not path.exists():
        path = path.with_suffix("") / "__init__.py"
    try:
        funcs = _functions(path, cache)
        orig = funcs[re.sub(r"__mutmut_\d+$", "__mutmut_orig", func)]
        mut = funcs[func]
    except (OSError, KeyError, SyntaxError):
        return False
    return ast.dump(orig.args) == ast.dump(mut.args) and _record_text_only(
        ast.Module(body=orig.body, type_ignores=[]), ast.Module(body=mut.body, type_ignores=[])
    )


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def main(argv: list[str] | None = None, lines=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", default="mutants", help="mutmut's folder (for the display-text check)")
    ap.add_argument("--sample-of", nargs="*", default=[], metavar="PACKAGE=TOTAL",
                    help="packages run as a sample, with their number of mutants")
    a = ap.parse_args(argv)
    sampled = dict(s.split("=") for s in a.sample_of)
    counts: dict[str, Counter] = defaultdict(Counter)
    survivors, cache = [], {}
    for line in lines if lines is not None else sys.stdin:
        m = LINE.match(line)
        if not m or m.group(2) == "not checked":
            continue
        name, status = m.groups()
        pkg = package(name)
        if status != "killed" and display_only(name, Path(a.mutants), cache):
            status = "display text"
        counts[pkg][status] += 1
        if status not in ("killed", "display text"):
            survivors.append(f"{name}: {status}")
    print("| package | killed / checked | score | display text | score without display text | other outcomes |")
    print("|---|---:|---:|---:|---:|---|")
    for pkg, c in sorted(counts.items()):
        checked = sum(c.values())
        k, disp = c["killed"], c["display text"]
        other = ", ".join(f"{s} {v}" for s, v in sorted(c.items()) if s not in ("killed", "display text")) or "—"
        rest = checked - disp
        note = ""
        if pkg in sampled:
            lo, hi = wilson(k, rest)
            note = f" (sample of {sampled[pkg]}; 95 % CI {100 * lo:.0f}–{100 * hi:.0f} %)"
        print(f"| {pkg} | {k} / {checked} | {100 * k / checked:.1f} % | {disp} | {100 * k / max(rest, 1):.1f} %{note} | {other} |")
    if survivors:
        print("\nnot killed:\n" + "\n".join(survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
