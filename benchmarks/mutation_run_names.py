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

# left out as under mutmut (pyproject.toml, [tool.mutmut]): the flex and compile tests, the wall-clock checks,
# and the check that a warning points at its caller's line (the trampoline is one frame more)
CALLER_LINE = ("tests/viz/test_overlay_figures_and_cjk_fonts.py::"
               "test_without_a_cjk_font_the_warning_names_the_packages_and_points_at_the_caller")


def run_one(name: str, root: str, stats: dict, also=(), deselect=()) -> tuple[str, str]:
    key = re.sub(r"__mutmut_\d+$", "", name)
    pkg = name.split(".")[1]
    if name.startswith("attnlab.distributed."):
        tests = ["tests/distributed"]
    else:
        tests = sorted(stats.get(key, [])) + [f for f in also if f.startswith(f"tests/{pkg}/")]
        if not tests:
            return name, "no tests"
    env = dict(os.environ, MUTANT_UNDER_TEST=name, PYTHONPATH="src", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-k", "not flex and not compile and not max_seconds and not is_fast",
           "--deselect", CALLER_LINE, *tests]
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
    args = parser.parse_args()
    root = "mutants"
    stats = json.load(open(f"{root}/mutmut-stats.json"))["tests_by_mangled_function_name"]
    names = [line.strip().rstrip(":") for line in sys.stdin if line.strip()]
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as ex:
        for name, status in ex.map(lambda n: run_one(n, root, stats, args.also, args.deselect), names):
            print(f"{name}: {status}", flush=True)


if __name__ == "__main__":
    main()
