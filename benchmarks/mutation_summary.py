"""Mutation score per package from ``mutmut results --all true`` (read on stdin).

    mutmut results --all true | python benchmarks/mutation_summary.py

Prints one Markdown row per package (attnlab.functional, attnlab.masks, ...):
killed / total and the score, and the surviving mutants' names below the table.
mutmut names a mutant ``module.x_function__mutmut_N`` (or ``module.xǁClassǁmethod__mutmut_N``).
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"\s*(\S+__mutmut_\d+): (.+?)\s*$")
PACKAGES = ("attnlab.functional", "attnlab.nn", "attnlab.kernels")


def package(name: str) -> str:
    module = re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]
    return next((p for p in PACKAGES if module.startswith(p + ".")), module)


def main(lines) -> int:
    counts: dict[str, Counter] = defaultdict(Counter)
    survivors = []
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        name, status = m.groups()
        counts[package(name)][status] += 1
        if status != "killed":
            survivors.append(f"{name}: {status}")
    print("| package | killed / mutants | score | other outcomes |\n|---|---:|---:|---|")
    for pkg, c in sorted(counts.items()):
        total = sum(c.values())
        other = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "killed") or "—"
        print(f"| {pkg} | {c['killed']} / {total} | {100 * c['killed'] / total:.1f} % | {other} |")
    if survivors:
        print("\nnot killed:\n" + "\n".join(survivors))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin))
