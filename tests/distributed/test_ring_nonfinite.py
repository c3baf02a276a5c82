"""Ring attention keeps the core's non-finite rule across the ring: a NaN key (or inf value) reaches
exactly the rows that may attend it, on the fused path without autograd and on the autograd path,
gradients included (a future NaN key used to leak into earlier rows of its block).

Two gloo processes, spawned here; the reference is whole-sequence attention in one process written
out in float64 torch (scores, −∞ where masked, softmax, weighted sum) on the clean input.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from attnlab import patterns as P

B, H, N, D, BAD = 2, 2, 8, 3, 5  # the key and value at position BAD hold NaN and inf

CASES = {
    "causal-contiguous": dict(layout="contiguous", causal=True, window=None, pad=False),
    "causal-zigzag": dict(layout="zigzag", causal=True, window=None, pad=False),
    "causal-zigzag-pad": dict(layout="zigzag", causal=True, window=None, pad=True),
    "window-zigzag": dict(layout="zigzag", causal=False, window=(1, 1), pad=False),
}


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v, up = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[1, [2, 7]] = False
    return q, k, v, up, pad


def _allow(case):
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allow = torch.ones(B, 1, N, N, dtype=torch.bool)
    if case["causal"]:
        allow &= j <= i
    if case["window"]:
        allow &= P.sliding_window(*case["window"]).allows(i, j, N)
    if case["pad"]:
        allow &= _inputs()[4][:, None, None, :]
    return allow


def _reference(case):
    q, k, v, up, _ = _inputs()
    allow = _allow(case)
    hit = allow[..., BAD].expand(B, H, N)  # the rows that may attend the bad position
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2) / D**0.5).masked_fill(~allow, float("-inf"))
    out = torch.softmax(s, -1).nan_to_num(0.0) @ v
    (out * up * ~hit[..., None]).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad, hit


def _worker(rank, world, port, results):
    import torch.distributed as dist

    from attnlab.distributed import context_parallel_attention, gather, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        got = {}
        for name, case in CASES.items():
            q, k, v, up, pad = _inputs()
            k[:, :, BAD], v[:, :, BAD] = float("nan"), float("inf")
            hit = _reference(case)[4]
            lay = case["layout"]
            kw = dict(causal=case["causal"], pattern=None if case["window"] is None else P.sliding_window(*case["window"]),
                      mask=shard(pad, dim=-1, layout=lay) if case["pad"] else None, mode="ring", layout=lay)
            with torch.no_grad():  # the fused CPU path
                fused, _ = context_parallel_attention(*(shard(t, layout=lay) for t in (q, k, v)), **kw)
            ql, kl, vl = (shard(t, layout=lay).clone().requires_grad_() for t in (q, k, v))
            out, _ = context_parallel_attention(ql, kl, vl, **kw)
            (torch.where(shard(hit, dim=-1, layout=lay)[..., None], 0.0, out) * shard(up, layout=lay)).sum().backward()
            got[name] = [gather(t.detach(), layout=lay) for t in (fused, out, ql.grad, kl.grad, vl.grad)]
        if rank == 0:
            results.update({n: [t.clone() for t in ts] for n, ts in got.items()})
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def results():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        res = manager.dict()
        mp.start_processes(_worker, args=(2, port, res), nprocs=2, join=True, start_method="spawn")
        return dict(res)


@pytest.mark.parametrize("name", list(CASES))
def test_a_non_finite_key_reaches_exactly_the_rows_that_may_attend_it(results, name):
    fused, out, gq, gk, gv = results[name]
    want_out, want_q, want_k, want_v, hit = _reference(CASES[name])
    assert hit.any() and (~hit).any()
    for what, o in (("fused output", fused), ("output", out)):
        assert torch.isnan(o[hit]).all(), what
        torch.testing.assert_close(o[~hit], want_out[~hit], rtol=0, atol=1e-10, msg=what)
    clean = torch.arange(N) != BAD
    for what, got, want in (("grad q", gq, want_q), ("grad k", gk, want_k), ("grad v", gv, want_v)):
        assert torch.isfinite(got).all(), what
        if what != "grad q":  # the bad position's own gradient is zero
            assert torch.equal(got[:, :, BAD], torch.zeros_like(got[:, :, BAD])), what
            got, want = got[:, :, clean], want[:, :, clean]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10, msg=what)
