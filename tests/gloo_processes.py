"""Tests' helper: run a function in W gloo processes on this machine and return rank 0's result.

    results = run_in_processes(fn, world=2)   # fn() runs on every rank inside its process group;
                                              # rank 0's returned dict comes back

Each process joins a fresh group (a free local port), runs with one thread, waits at a barrier so
that no rank leaves while another still talks to the group, and leaves it. ``fn`` must be a
module-level function (it is pickled by name for the spawned processes).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn: Callable[[], dict], results) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        got = fn()
        if rank == 0:
            results.update(got)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_in_processes(fn: Callable[[], dict], world: int = 2) -> dict:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_entry, args=(world, free_port(), fn, results), nprocs=world, join=True, start_method="spawn")
        return dict(results)
