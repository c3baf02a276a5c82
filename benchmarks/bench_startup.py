"""Start-up time of the commands, whole process, against ``python -c 'import torch'`` run in turn.

    .venv/bin/python benchmarks/bench_startup.py [--runs 5]

Each command and the yardstick start as fresh processes, alternately (A B A B ...), after one
warm-up each; the ratio is taken pair by pair, so a machine whose speed drifts moves both. Prints
the median wall seconds of each and the median ratio. Run it with ``PYTHONPATH=<checkout>/src`` to
time another checkout (the before/after figures of benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "attnlab --help": ["-m", "attnlab", "--help"],
    "attnlab --version": ["-m", "attnlab", "--version"],
    "attnlab nosuchverb": ["-m", "attnlab", "nosuchverb"],
    "import attnlab": ["-c", "import attnlab"],
    "import attnlab; attnlab.create": ["-c", "import attnlab; attnlab.create"],
}
YARDSTICK = ["-c", "import torch"]


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    print(f"{'command':<34} {'median s':>9} {'import torch s':>15} {'ratio':>7}")
    for name, cmd in COMMANDS.items():
        wall(cmd), wall(YARDSTICK)  # warm-up: the files in the page cache
        pairs = [(wall(cmd), wall(YARDSTICK)) for _ in range(args.runs)]
        a, b = zip(*pairs)
        ratio = statistics.median(x / y for x, y in pairs)
        print(f"{name:<34} {statistics.median(a):9.3f} {statistics.median(b):15.3f} {ratio:7.2f}")


if __name__ == "__main__":
    main()
