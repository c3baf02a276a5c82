"""A reproducible random sample of mutant names, for packages too large to run whole on 2 cores.

    mutmut results --all true | python benchmarks/mutation_sample.py attnlab.nn. 600 --seed 17

prints ``600`` names drawn uniformly (``random.Random(seed).sample``) from the mutants whose name
starts with the prefix, sorted; pass them to ``mutmut run NAME ...``. The killed fraction of a uniform
sample estimates the package's score; ``mutation_summary.py`` prints it with a 95 % interval.
"""

from __future__ import annotations

import argparse
import random
import re
import sys

LINE = re.compile(r"\s*(\S+__mutmut_\d+): ")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefix")
    ap.add_argument("size", type=int)
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args(argv)
    names = sorted({m.group(1) for line in sys.stdin if (m := LINE.match(line)) and m.group(1).startswith(a.prefix)})
    for name in sorted(random.Random(a.seed).sample(names, min(a.size, len(names)))):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
