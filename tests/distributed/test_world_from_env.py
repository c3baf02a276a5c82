"""``World.from_env``: the process's place in a run, read from the variables a launcher sets (torchrun sets
RANK, WORLD_SIZE and LOCAL_RANK; other launchers may leave LOCAL_RANK out)."""

from __future__ import annotations

import attnlab.distributed.ddp as ddp


def test_without_a_world_size_it_is_a_world_of_one(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    w = ddp.World.from_env()
    assert (w.rank, w.size, w.local_rank, w.is_main) == (0, 1, 0, True)


def test_rank_and_size_from_the_environment_and_local_rank_0_when_unset(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setattr(ddp.dist, "is_initialized", lambda: True)  # a process group already joined
    w = ddp.World.from_env()
    assert (w.rank, w.size, w.local_rank, w.is_main) == (3, 4, 0, False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ddp.World.from_env().local_rank == 1
