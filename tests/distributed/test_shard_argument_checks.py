"""Context-parallel attention's entry checks (one process: they run before any process group is needed)
and empty shards (two gloo processes): an empty result of the right shape with zero gradients."""

from __future__ import annotations

import os
import re
import socket

import pytest
import torch
import torch.multiprocessing as mp

from attnlab import patterns as P
from attnlab.distributed import context_parallel_attention, ring_attention, shard, ulysses_attention

ENTRIES = {"ring_attention": ring_attention, "ulysses_attention": ulysses_attention,
           "context_parallel_attention": lambda q, k, v, **kw: context_parallel_attention(q, k, v, **kw)[0]}
SCALE = re.escape("scale must be a finite positive number (or None for 1/sqrt(d)); got ")


def _qkv(dtype=torch.float32):
    return tuple(torch.randn(1, 2, 4, 3, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("scale,shown", [(float("nan"), "nan"), (0.0, "0.0"), (-2.0, "-2.0"), (float("inf"), "inf"),
                                         ("1", "'1'")])
def test_a_scale_that_is_not_finite_and_positive_is_refused(entry, scale, shown):
    with pytest.raises(ValueError, match=SCALE + re.escape(shown)):
        ENTRIES[entry](*_qkv(), scale=scale)


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: (q.long(), k, v), "q must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype torch.int64"),
    (lambda q, k, v: (q, k, v.long()), "v must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype torch.int64"),
    (lambda q, k, v: (q, k.double(), v), "q, k, v must share one dtype; got q torch.float32, k torch.float64, v torch.float32"),
])
def test_integer_or_mixed_dtypes_are_a_type_error_naming_them(entry, change, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        ENTRIES[entry](*change(*_qkv()))


@pytest.mark.parametrize("entry", ["ring_attention", "ulysses_attention"])
@pytest.mark.parametrize("kwargs,message", [
    (dict(mask=torch.ones(1, 3, dtype=torch.bool)),
     "mask must be bool (b, n/W) = (1, 4), True = may attend (a real key); got torch.bool (1, 3)"),
    (dict(mask=torch.ones(1, 4)),
     "mask must be bool (b, n/W) = (1, 4), True = may attend (a real key); got torch.float32 (1, 4)"),
    (dict(mask=[True] * 4), "mask must be bool (b, n/W) = (1, 4), True = may attend (a real key); got list"),
    (dict(layout="striped"), "layout must be one of ('contiguous', 'zigzag'); got 'striped'"),
    (dict(pattern="causal"), "pattern must be None or an attnlab.patterns.Pattern; got str"),
])
def test_bad_masks_layouts_and_patterns_are_named(entry, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ENTRIES[entry](*_qkv(), **kwargs)


@pytest.mark.parametrize("entry", ["ring_attention", "ulysses_attention"])
def test_shapes_that_disagree_or_have_no_feature_are_named(entry):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=re.escape("q, k and v must share (b, h, n/W) (self-attention over one "
                                                   "sharded sequence); got q (1, 2, 4, 3), k (1, 2, 3, 3), v (1, 2, 4, 3)")):
        ENTRIES[entry](q, k[:, :, :3], v)
    with pytest.raises(ValueError, match=re.escape("q must have at least one feature (d >= 1); got shape (1, 2, 4, 0)")):
        ENTRIES[entry](q[..., :0], k[..., :0], v)
    with pytest.raises(ValueError, match=re.escape("q must be this rank's shard (b, h, n/W, d); got shape (2, 4, 3)")):
        ENTRIES[entry](q[0], k, v)
    with pytest.raises(ValueError, match=re.escape("context-parallel attention needs query and key feature sizes to "
                                                   "match: query (1, 2, 4, 3) has d=3, key (1, 2, 4, 2) has d=2")):
        ENTRIES[entry](q, k[..., :2], v)


# --- empty shards, two processes ----------------------------------------------------------------------------

EMPTY = {  # name → (q/k shape, v shape) on each rank
    "no positions": ((2, 2, 0, 3), (2, 2, 0, 5)),
    "no sequences": ((0, 2, 4, 3), (0, 2, 4, 5)),
    "no value features": ((1, 2, 4, 3), (1, 2, 4, 0)),
}
SETTINGS = {
    "ring": dict(mode="ring"),
    "ring-causal-zigzag": dict(mode="ring", causal=True, layout="zigzag"),
    "ring-window-pad": dict(mode="ring", pattern=P.sliding_window(1, 1), pad=True),
    "ulysses-causal-pad": dict(mode="ulysses", causal=True, pad=True),
    "ulysses-longformer-zigzag": dict(mode="ulysses", pattern=P.sliding_window(1, 0) | P.global_tokens([0]),
                                      layout="zigzag"),
}


def _empty_worker(rank, world, port, results):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        got = {}
        for shape_name, (qs, vs) in EMPTY.items():
            for setting, kw in SETTINGS.items():
                kw = dict(kw)
                q, k = (torch.randn(qs, dtype=torch.float64, requires_grad=True) for _ in range(2))
                v = torch.randn(vs, dtype=torch.float64, requires_grad=True)
                pad = torch.ones(qs[0], qs[2], dtype=torch.bool) if kw.pop("pad", False) else None
                out, _ = context_parallel_attention(q, k, v, mask=pad, **kw)
                out.sum().backward()
                got[f"{shape_name}/{setting}"] = [out.detach(), q.grad, k.grad, v.grad]
                with torch.no_grad():  # inference: the ring's fused path
                    got[f"{shape_name}/{setting}/no grad"] = context_parallel_attention(q, k, v, mask=pad, **kw)[0]
        try:  # a sequence shorter than the number of processes cannot be split
            shard(torch.zeros(1, 2, 1, 3))
            got["shorter than the world"] = "no error"
        except ValueError as e:
            got["shorter than the world"] = str(e)
        for layout in ("contiguous", "zigzag"):  # an empty sequence splits into empty shards
            got[f"empty sequence/{layout}"] = tuple(shard(torch.zeros(1, 2, 0, 3), layout=layout).shape)
        if rank == 0:
            results.update(got)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def empty_results():
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_empty_worker, args=(2, _free_port(), results), nprocs=2, join=True, start_method="spawn")
        return dict(results)


@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("shape_name", list(EMPTY))
def test_empty_shards_give_an_empty_result_and_zero_gradients(empty_results, shape_name, setting):
    qs, vs = EMPTY[shape_name]
    out, gq, gk, gv = empty_results[f"{shape_name}/{setting}"]
    assert out.shape == (*qs[:3], vs[-1]) and out.dtype == torch.float64  # one process: (b, h, n, d_v) with a 0 in it
    assert out.numel() == 0
    inference = empty_results[f"{shape_name}/{setting}/no grad"]
    assert inference.shape == out.shape and inference.dtype == torch.float64
    for grad, shape in ((gq, qs), (gk, qs), (gv, vs)):
        assert grad is not None and grad.shape == shape
        assert torch.equal(grad, torch.zeros(shape, dtype=torch.float64))


def test_a_sequence_shorter_than_the_world_is_named_when_sharded(empty_results):
    assert empty_results["shorter than the world"] == (
        "a sequence of n=1 positions does not split evenly: the contiguous layout over 2 processes needs n "
        "divisible by 2; pad the sequence (and mask the padding)")


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_an_empty_sequence_shards_into_empty_shards(empty_results, layout):
    assert empty_results[f"empty sequence/{layout}"] == (1, 2, 0, 3)
