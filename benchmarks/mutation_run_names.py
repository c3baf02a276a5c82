"""Run named mutants the way mutmut does, outside mutmut: each against the tests that mutmut's stats say
reach its function (``-x``, the mutant switched on with ``MUTANT_UNDER_TEST``), two at a time; mutants
of ``attnlab.distributed`` against ``tests/distributed`` whole, since their functions run in the gloo
ranks' processes, which the stats do not see.

    cd <a worktree where benchmarks/mutation_package.sh has run>
    python benchmarks/mutation_run_names.py < names.txt > results.txt

Prints ``NAME: killed by TEST``, ``survived``, ``timeout`` (600 s) or ``no tests``. mutmut 3 runs
mutants it has listed itself; this runs any names (a sample drawn after the fact, for example).

Tests written after mutmut's stats were taken are unknown to them. ``--also FILE...`` adds such test
files (copied into ``mutants/tests`` first), each for the mutants of the package whose test folder holds
it (``tests/viz/...`` for ``attnlab.viz``); ``--deselect NODEID`` leaves out a test that cannot pass under
mutmut's trampolines (one that reads its caller's frame, say) or on the mutants' older source.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys


def mutmut_pytest_args(pyproject: str = "pyproject.toml") -> list[str]:
    """The pytest arguments of ``[tool.mutmut]`` (what mutmut leaves out: the flex and compile tests, the
    wall-clock checks, the checks that read the source ...), so a mutant run here sees the tests mutmut sees."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(pyproject, "rb") as f:
        return list(tomllib.load(f)["tool"]["mutmut"]["pytest_add_cli_args"])


def run_one(name: str, root: str, stats: dict, pytest_args: list[str], also=(), deselect=()) -> tuple[str, str]:
    key = re.sub(r"__mutmut_\d+$", "", name)
    pkg = name.split(".")[1]
    if name.startswith("attnlab.distributed."):
        tests = ["tests/distributed"]
    else:
        tests = sorted(stats.get(key, [])) + [f for f in also if f.startswith(f"tests/{pkg}/")]
        if not tests:
            return name, "no tests"
    env = dict(os.environ, MUTANT_UNDER_TEST=name, PYTHONPATH="src", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", *pytest_args, *tests]
    cmd += [a for d in deselect for a in ("--deselect", d)]
    try:
        r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return name, "timeout"
    if r.returncode == 0:
        return name, "survived"
    if r.returncode == 5:
        return name, "no tests"
    m = re.search(r"^(FAILED|ERROR) (\S+)", r.stdout, re.M)
    return name, "killed by " + (m.group(2) if m else f"exit {r.returncode}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Run named mutants (read from stdin) outside mutmut.")
    parser.add_argument("--also", nargs="*", default=[], help="test files written after the stats")
    parser.add_argument("--deselect", nargs="*", default=[], help="test node ids to leave out")
    parser.add_argument("--print-pytest-args", action="store_true", help="print [tool.mutmut]'s pytest arguments, "
                        "one a line (benchmarks/mutation_recheck.sh runs with them), and stop")
    args = parser.parse_args()
    if args.print_pytest_args:
        print("\n".join(mutmut_pytest_args()))
        return
    root = "mutants"
    stats = json.load(open(f"{root}/mutmut-stats.json"))["tests_by_mangled_function_name"]
    names = [line.strip().rstrip(":") for line in sys.stdin if line.strip()]
    pytest_args = mutmut_pytest_args()
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        for name, status in ex.map(lambda n: run_one(n, root, stats, pytest_args, args.also, args.deselect), names):
            print(f"{name}: {status}", flush=True)


if __name__ == "__main__":
    main()
