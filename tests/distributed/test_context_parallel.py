"""Context-parallel attention on gloo: 2 and 4 processes against one process, float64, with gradients.

The reference is written here with plain torch ops (scores, −inf where masked, softmax,
weighted sum) over the whole sequence in one process; each worker process runs
``attnlab.distributed.context_parallel_attention`` on its shard, back-propagates its shard
of a fixed upstream gradient, and the gathered outputs and input gradients must match
the reference to 1e-10.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from attnlab import patterns as P
from attnlab.nn.backends import ContextParallel

B, H, N, D = 2, 4, 16, 3

CASES = {
    "ring-full-pad": dict(mode="ring", layout="contiguous", causal=False, pattern=None, pad=True),
    "ring-causal": dict(mode="ring", layout="contiguous", causal=True, pattern=None, pad=False),
    "ring-zigzag-causal-pad": dict(mode="ring", layout="zigzag", causal=True, pattern=None, pad=True),
    "ring-window-halo": dict(mode="ring", layout="contiguous", causal=False, pattern=("window", 2, 3), pad=True),
    "ring-window-causal-halo": dict(mode="ring", layout="contiguous", causal=True, pattern=("window", 3, 3), pad=False),
    "ring-wide-window": dict(mode="ring", layout="contiguous", causal=False, pattern=("window", 6, 5), pad=False),
    "ring-longformer-pad": dict(mode="ring", layout="zigzag", causal=False, pattern=("longformer", 1, 1), pad=True),
    "ulysses-causal": dict(mode="ulysses", layout="contiguous", causal=True, pattern=None, pad=False),
    "ulysses-zigzag-causal-pad": dict(mode="ulysses", layout="zigzag", causal=True, pattern=None, pad=True),
    "ulysses-window": dict(mode="ulysses", layout="contiguous", causal=False, pattern=("window", 2, 2), pad=False),
    "ulysses-longformer": dict(mode="ulysses", layout="zigzag", causal=False, pattern=("longformer", 1, 1), pad=False),
}


def _pattern(spec):
    if spec is None:
        return None
    kind, before, after = spec
    win = P.sliding_window(before, after)
    return win if kind == "window" else win | P.global_tokens([0, 9])


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v, up = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[1, 11:] = False  # the second sequence has 11 real tokens
    pad[0, 5] = False
    return q, k, v, up, pad


def _reference(case):
    """Whole-sequence attention in one process, written out: the test's own softmax."""
    q, k, v, up, pad = _inputs()
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allow = torch.ones(N, N, dtype=torch.bool)
    pattern = _pattern(case["pattern"])
    if pattern is not None:
        allow &= pattern.allows(i, j, N)
    if case["causal"]:
        allow &= j <= i
    allow = allow[None, None] & (pad[:, None, None, :] if case["pad"] else True)
    s = (q @ k.transpose(-1, -2) / D**0.5).masked_fill(~allow, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)  # a row with no key: zeros
    out = w @ v
    (out * up).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def _worker(rank, world, port, results, poison):
    import torch.distributed as dist

    from attnlab.distributed import context_parallel_attention, gather, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        out_all = {}
        for name, case in CASES.items():
            q, k, v, up, pad = _inputs()
            if poison and case["pad"]:  # NaN and inf in the padded keys and values
                k, v = k.clone(), v.clone()
                k[~pad[:, None, :, None].expand_as(k)] = float("nan")
                v[1, :, 12] = float("inf")
            lay = case["layout"]
            ql, kl, vl = (shard(t, layout=lay).clone().requires_grad_() for t in (q, k, v))
            pl = shard(pad, dim=-1, layout=lay) if case["pad"] else None
            out, none = context_parallel_attention(
                ql, kl, vl, causal=case["causal"], pattern=_pattern(case["pattern"]),
                mask=pl, mode=case["mode"], layout=lay,
            )
            assert none is None
            (out * shard(up, layout=lay)).sum().backward()
            got = [gather(t.detach(), layout=lay) for t in (out, ql.grad, kl.grad, vl.grad)]
            out_all[name] = got
        for name in ("ring-zigzag-causal-pad", "ring-longformer-pad", "ring-full-pad"):  # inference: the fused path
            case = CASES[name]
            q, k, v, up, pad = _inputs()
            lay = case["layout"]
            with torch.no_grad():
                out, _ = context_parallel_attention(
                    *(shard(t, layout=lay) for t in (q, k, v)), causal=case["causal"], pattern=_pattern(case["pattern"]),
                    mask=shard(pad, dim=-1, layout=lay), mode="ring", layout=lay)
                out_all[f"nograd:{name}"] = [gather(out, layout=lay)]
        try:  # 3 heads over 2 or 4 processes
            context_parallel_attention(*(torch.zeros(1, 3, 4, 2) for _ in range(3)), mode="ulysses")
            out_all["odd-heads"] = "no error"
        except ValueError as e:
            out_all["odd-heads"] = str(e)
        if rank == 0:
            results.update({k: v if isinstance(v, str) else [t.clone() for t in v] for k, v in out_all.items()})
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(world: int, poison: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_worker, args=(world, _free_port(), results, poison), nprocs=world, join=True,
                           start_method="spawn")
        return dict(results)


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def run(request):
    return request.param, _run(request.param)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_one_process(run, name):
    world, results = run
    ref = _reference(CASES[name])
    for what, got, want in zip(("output", "grad q", "grad k", "grad v"), results[name], ref):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10, msg=f"{name}, world {world}: {what}")


@pytest.mark.parametrize("name", ["ring-zigzag-causal-pad", "ring-longformer-pad", "ring-full-pad"])
def test_inference_without_autograd_matches(run, name):
    world, results = run
    torch.testing.assert_close(results[f"nograd:{name}"][0], _reference(CASES[name])[0], rtol=0, atol=1e-10)


def test_ulysses_names_heads_that_do_not_divide(run):
    world, results = run
    assert f"h=3 heads do not divide by the world size {world}" in results["odd-heads"]


def test_non_finite_padded_keys_change_nothing():
    results = _run(2, poison=True)
    for name, case in CASES.items():
        if not case["pad"]:
            continue
        ref = _reference(case)
        for what, got, want in zip(("output", "grad q", "grad k", "grad v"), results[name], ref):
            if what in ("grad k", "grad v"):  # the poisoned positions' own gradients are zero
                want = want.clone()
            assert torch.isfinite(got).all(), f"{name}: {what} has non-finite values"
            torch.testing.assert_close(got, want, rtol=0, atol=1e-10, msg=f"{name}: {what}")


# -- MultiHeadAttention(backend=ContextParallel(...)) -------------------------------------------------------

def _mha_worker(rank, world, port, results):
    import torch.distributed as dist

    from attnlab.distributed import gather, shard
    from attnlab.nn import MultiHeadAttention
    from attnlab.nn.backends import ContextParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        out = {}
        for name, kw in {"ring-rope-causal": dict(rope=True), "ulysses-gqa": dict(num_kv_heads=2, mode="ulysses")}.items():
            torch.manual_seed(0)
            mode = kw.pop("mode", "ring")
            m = MultiHeadAttention(8, 4, backend=ContextParallel(mode=mode), **kw).double()
            g = torch.Generator().manual_seed(1)
            x = torch.randn(2, N, 8, generator=g, dtype=torch.float64)
            pad = torch.ones(2, N, dtype=torch.bool)
            pad[1, 13:] = False
            xl = shard(x, dim=1).clone().requires_grad_()
            y, none = m(xl, mask=shard(pad, dim=1), causal=True)
            assert none is None
            y.sum().backward()
            grads = [p.grad.clone() for p in m.parameters()]
            for gr in grads:
                dist.all_reduce(gr)  # the whole sequence's parameter gradient
            out[name] = [gather(y.detach(), dim=1), gather(xl.grad, dim=1), *grads]
        if rank == 0:
            results.update(out)
    finally:
        dist.destroy_process_group()


def test_multi_head_attention_context_parallel_matches_one_process():
    from attnlab.nn import MultiHeadAttention

    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_mha_worker, args=(2, _free_port(), results), nprocs=2, join=True, start_method="spawn")
        results = dict(results)
    for name, kw in {"ring-rope-causal": dict(rope=True), "ulysses-gqa": dict(num_kv_heads=2)}.items():
        torch.manual_seed(0)
        m = MultiHeadAttention(8, 4, **kw).double()  # the same weights, one process, the whole sequence
        g = torch.Generator().manual_seed(1)
        x = torch.randn(2, N, 8, generator=g, dtype=torch.float64).requires_grad_()
        pad = torch.ones(2, N, dtype=torch.bool)
        pad[1, 13:] = False
        y, _ = m(x, mask=pad, causal=True)
        y.sum().backward()
        want = [y.detach(), x.grad, *(p.grad for p in m.parameters())]
        for i, (a, b) in enumerate(zip(results[name], want)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-10, msg=f"{name}: tensor {i}")


def test_context_parallel_module_refuses_what_it_cannot_do():
    from attnlab.nn import MultiHeadAttention

    with pytest.raises(ValueError, match="without ALiBi"):
        MultiHeadAttention(8, 2, backend=ContextParallel(), alibi=True)
    with pytest.raises(ValueError, match="only on the contiguous layout"):
        MultiHeadAttention(8, 2, backend=ContextParallel(layout="zigzag"), rope=True)
