"""Context parallelism inside a process group smaller than the world: 4 gloo processes in two
groups of 2 ([0, 1] and [2, 3]), each group working on its own sequence. Sharding, gathering and
ring attention must use the group's size and its members' global ranks, never the world's.

The reference is float64 NumPy written here: softmax(q kᵀ / √d) v over the whole sequence
(causal: j ≤ i), per group.
"""

from __future__ import annotations

import numpy as np
import torch
from gloo_processes import run_in_processes

B, H, N, D = 1, 2, 8, 3


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3)]


def _reference(q, k, v, causal: bool) -> np.ndarray:
    q, k, v = (t.numpy() for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    if causal:
        s = np.where(np.tril(np.ones((N, N), bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


def _in_two_groups() -> dict:
    import torch.distributed as dist

    from attnlab.distributed import context_parallel_attention, gather, shard

    rank = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank creates both, in the same order
    mine = rank // 2
    g = groups[mine]
    whole = torch.arange(N * 2, dtype=torch.float64).reshape(N, 2) + 100 * mine
    errors = {}
    for layout in ("contiguous", "zigzag"):
        local = shard(whole, dim=0, group=g, layout=layout)
        errors[f"gather {layout}"] = float((gather(local, dim=0, group=g, layout=layout) - whole).abs().max())
    q, k, v = _inputs(seed=mine)  # each group its own sequence
    for mode in ("ring", "ulysses"):
        for causal, layout in ((False, "contiguous"), (True, "zigzag")):
            out, _ = context_parallel_attention(*(shard(t, group=g, layout=layout) for t in (q, k, v)), causal=causal,
                                                mode=mode, group=g, layout=layout)
            got = gather(out, group=g, layout=layout).numpy()
            errors[f"{mode} causal={causal}"] = float(np.abs(got - _reference(q, k, v, causal)).max())
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, errors)
    return {f"rank {r}": e for r, e in enumerate(everyone)}


def test_each_group_of_two_shards_gathers_and_attends_over_its_own_sequence():
    results = run_in_processes(_in_two_groups, world=4)
    assert sorted(results) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    for rank, errors in results.items():
        assert len(errors) == 6
        for what, err in errors.items():
            assert err < 1e-12, f"{rank}, {what}: max |error| {err}"
