"""Ranks agree before they communicate: when the ranks of a context-parallel call are given shards of
different shapes or different options, or one rank's own check fails, every rank raises the same
ValueError naming what differs (two gloo processes), instead of a hang or an aborted group."""

from __future__ import annotations

import pytest
import torch
from gloo_processes import run_in_processes


def _call_with(rank_kwargs) -> dict:
    import torch.distributed as dist

    from attnlab.distributed import context_parallel_attention

    rank = dist.get_rank()
    kw = dict(n=4, causal=False, mask=False, mode="ring", bad_mask=False)
    kw.update(rank_kwargs.get(rank, {}))
    q = k = v = torch.randn(2, 2, kw["n"], 4)
    mask = torch.ones(2, 3 if kw["bad_mask"] else kw["n"], dtype=torch.bool) if kw["mask"] or kw["bad_mask"] else None
    try:
        context_parallel_attention(q, k, v, causal=kw["causal"], mask=mask, mode=kw["mode"])
        message = None
    except ValueError as e:
        message = str(e)
    every: list = [None, None]
    dist.all_gather_object(every, message)  # (the group still works: nobody hung or aborted)
    return {"messages": every}


def _shapes():
    return _call_with({1: {"n": 6}})


def _causal():
    return _call_with({1: {"causal": True}})


def _one_rank_fails():
    return _call_with({1: {"bad_mask": True}})


def _agreeing():
    return _call_with({})


@pytest.mark.parametrize("fn,message", [
    (_shapes, "the ranks of a context-parallel call disagree before communicating (q: rank 0 (2, 2, 4, 4), rank 1 "
              "(2, 2, 6, 4); k: rank 0 (2, 2, 4, 4), rank 1 (2, 2, 6, 4); v: rank 0 (2, 2, 4, 4), rank 1 (2, 2, 6, 4)); "
              "every rank must pass shards of one shape and the same options"),
    (_causal, "the ranks of a context-parallel call disagree before communicating (causal: rank 0 False, rank 1 "
              "True); every rank must pass shards of one shape and the same options"),
    (_one_rank_fails, "rank 1: mask must be bool (b, n/W) = (2, 4), True = may attend (a real key); got torch.bool (2, 3)"),
])
def test_every_rank_raises_the_same_error(fn, message):
    got = run_in_processes(fn, world=2)
    assert got["messages"] == [message, message]


def test_ranks_that_agree_attend():
    assert run_in_processes(_agreeing, world=2)["messages"] == [None, None]
