"""The ``--threads`` option shared by the training and experiment verbs.

Without ``--threads``, torch's own count (one thread per core) less the cores that other work keeps
busy, read from the load average: on a busy machine every thread of a small model waits for a core,
and ``attnlab generate`` ran four times slower with two threads than with one on a 2-core machine at
load 8.6. On an idle machine, or where no load average exists, torch's choice stands.
"""

from __future__ import annotations

import argparse
import os

from .._limits import check_value

HELP = ("torch CPU threads (default: torch's choice, less the cores that other work keeps busy; 1 is often "
        "fastest for these small models)")


def add_threads(p: argparse.ArgumentParser, default: int | None = None, help: str = HELP) -> None:
    p.add_argument("--threads", type=int, default=default, help=help)


def threads_for_the_load(torch_threads: int, cores: int, load: float) -> int:
    """torch's thread count, at most the cores that the 1-minute load average leaves idle (at least 1)."""
    idle = int(cores - load + 0.5)  # a core counts as idle when at least half of it is
    return max(1, min(torch_threads, idle))


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows has none
        return None


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's thread count from ``--threads``; without it, fewer threads on a busy machine."""
    import torch

    if args.threads is None:
        load, cores = _load(), os.cpu_count()
        if load is not None and cores:
            torch.set_num_threads(threads_for_the_load(torch.get_num_threads(), cores, load))
        return
    check_value("threads", args.threads, int, label="--threads")  # 1..1024: torch crashes on absurd counts
    torch.set_num_threads(args.threads)
