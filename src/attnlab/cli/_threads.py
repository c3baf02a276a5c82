"""The ``--threads`` option shared by the training and experiment verbs."""

from __future__ import annotations

import argparse

from .._limits import check_value

HELP = "torch CPU threads (default: torch's choice; 1 is often faster for these small models on a busy machine)"


def add_threads(p: argparse.ArgumentParser, default: int | None = None, help: str = HELP) -> None:
    p.add_argument("--threads", type=int, default=default, help=help)


def apply_threads(args: argparse.Namespace) -> None:
    """Set torch's thread count from ``--threads`` (None: leave torch's choice)."""
    if args.threads is None:
        return
    import torch

    check_value("threads", args.threads, int, label="--threads")  # 1..1024: torch crashes on absurd counts
    torch.set_num_threads(args.threads)
