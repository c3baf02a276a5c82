"""Context parallelism where the older tests are thin: Ulysses with ``causal`` and a pattern together,
and ring attention without padding and without autograd (the fused inference path), and the path that
devices other than the CPU take (the core's attention in place of the CPU kernels), run on the CPU.

The reference is dense float64 NumPy written here: the allowed pairs from the patterns'
definitions (window |band|, global rows and columns, strides) and causality, a softmax with
−inf where masked (a row with no key gives zeros), and the backward by hand
(dV = Wᵀ dO, dS = W ⊙ (dO Vᵀ − rowsum), dQ = dS K · scale, dK = dSᵀ Q · scale, scale = 1/√d unless a case gives one). Each gloo worker
process runs ``context_parallel_attention`` on its shard, with autograd (backward of its shard
of a fixed upstream gradient) and under ``torch.no_grad()``; the gathered results must match
the reference to 1e-10 with 2 processes (and 4 with ``-m slow``).
"""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from attnlab import patterns as P

B, H, N, D = 2, 4, 16, 3

CASES = {
    "ulysses-causal-window": dict(mode="ulysses", layout="contiguous", causal=True, pattern=("window", 3, 2), pad=False),
    "ulysses-zigzag-causal-longformer-pad": dict(mode="ulysses", layout="zigzag", causal=True,
                                                 pattern=("longformer", 1, 1), pad=True),
    "ulysses-causal-strided": dict(mode="ulysses", layout="contiguous", causal=True, pattern=("strided", 3), pad=False),
    "ulysses-zigzag-causal": dict(mode="ulysses", layout="zigzag", causal=True, pattern=None, pad=False),
    "ring-causal": dict(mode="ring", layout="contiguous", causal=True, pattern=None, pad=False),
    "ring-zigzag-causal": dict(mode="ring", layout="zigzag", causal=True, pattern=None, pad=False),
    "ring-full": dict(mode="ring", layout="contiguous", causal=False, pattern=None, pad=False),
    "ring-zigzag-causal-strided": dict(mode="ring", layout="zigzag", causal=True, pattern=("strided", 3), pad=False),
    "ring-causal-window-halo": dict(mode="ring", layout="contiguous", causal=True, pattern=("window", 3, 3), pad=False),
    # a scale that is not 1/sqrt(d), on each path (the window's halo exchange, the ring, Ulysses)
    "ring-causal-window-halo-pad-scale": dict(mode="ring", layout="contiguous", causal=True, pattern=("window", 3, 3),
                                              pad=True, scale=0.3),
    "ring-zigzag-causal-scale": dict(mode="ring", layout="zigzag", causal=True, pattern=None, pad=False, scale=0.3),
    "ulysses-causal-pad-scale": dict(mode="ulysses", layout="contiguous", causal=True, pattern=None, pad=True, scale=0.3),
    # the path that devices other than the CPU take (the core's attention instead of the CPU kernels), run here
    "ring-zigzag-causal-pad-scale-explicit": dict(mode="ring", layout="zigzag", causal=True, pattern=None, pad=True,
                                                  scale=0.3, explicit=True),
    "ring-causal-window-halo-pad-scale-explicit": dict(mode="ring", layout="contiguous", causal=True,
                                                       pattern=("window", 3, 3), pad=True, scale=0.3, explicit=True),
}


def _pattern(spec):
    """The library's pattern for a case (what the workers pass in)."""
    if spec is None:
        return None
    if spec[0] == "strided":
        return P.strided(spec[1])
    win = P.sliding_window(spec[1], spec[2])
    return win if spec[0] == "window" else win | P.global_tokens([0, 9])


def _allowed(case) -> np.ndarray:
    """(N, N) bool, True = query i may attend key j, from the patterns' definitions (not the library's)."""
    i, j = np.arange(N)[:, None], np.arange(N)[None, :]
    allow = np.ones((N, N), bool)
    spec = case["pattern"]
    if spec is not None and spec[0] == "strided":
        allow &= (np.abs(i - j) < spec[1]) | ((i - j) % spec[1] == 0)
    elif spec is not None:
        band = (j >= i - spec[1]) & (j <= i + spec[2])
        allow &= band if spec[0] == "window" else band | np.isin(i, [0, 9]) | np.isin(j, [0, 9])
    if case["causal"]:
        allow &= j <= i
    return allow


def _inputs():
    g = torch.Generator().manual_seed(3)
    q, k, v, up = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[1, 12:] = False
    pad[0, 3] = False
    return q, k, v, up, pad


def _reference(case):
    """Dense float64 NumPy attention over the whole sequence → (out, dq, dk, dv)."""
    q, k, v, up, pad = (t.numpy() for t in _inputs())
    allow = _allowed(case)[None, None] & (pad[:, None, None, :] if case["pad"] else True)  # (b, 1, n, n)
    sc = case.get("scale", 1 / np.sqrt(D))
    s = np.where(allow, q @ k.transpose(0, 1, 3, 2) * sc, -np.inf)
    live = allow.any(-1, keepdims=True)
    e = np.where(allow, np.exp(s - np.where(live, s.max(-1, keepdims=True), 0.0)), 0.0)
    w = np.where(live, e / np.where(live, e.sum(-1, keepdims=True), 1.0), 0.0)  # a row with no key: zeros
    out = w @ v
    dw = up @ v.transpose(0, 1, 3, 2)
    ds = w * (dw - (dw * w).sum(-1, keepdims=True))
    return out, ds @ k * sc, ds.transpose(0, 1, 3, 2) @ q * sc, w.transpose(0, 1, 3, 2) @ up


def _run_case(case):
    """This rank's part of one case, gathered: {"grad": [out, dq, dk, dv], "nograd": [out]}; an
    ``explicit`` case switches the ring's CPU kernels off for its duration."""
    from attnlab.distributed import ring

    saved = ring._fused_ok, ring._window_kernel_ok
    if case.get("explicit"):
        ring._fused_ok = ring._window_kernel_ok = lambda q: False
    try:
        return _run(case)
    finally:
        ring._fused_ok, ring._window_kernel_ok = saved


def _run(case):
    from attnlab.distributed import context_parallel_attention, gather, shard

    q, k, v, up, pad = _inputs()
    lay = case["layout"]
    kw = dict(causal=case["causal"], pattern=_pattern(case["pattern"]), mode=case["mode"], layout=lay, scale=case.get("scale"),
              mask=shard(pad, dim=-1, layout=lay) if case["pad"] else None)
    ql, kl, vl = (shard(t, layout=lay).clone().requires_grad_() for t in (q, k, v))
    out, _ = context_parallel_attention(ql, kl, vl, **kw)
    (out * shard(up, layout=lay)).sum().backward()
    grad = [gather(t.detach(), layout=lay) for t in (out, ql.grad, kl.grad, vl.grad)]
    with torch.no_grad():
        plain, _ = context_parallel_attention(*(shard(t, layout=lay) for t in (q, k, v)), **kw)
    return {"grad": grad, "nograd": [gather(plain, layout=lay)]}


def _worker(rank, world, port, results):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        got = {name: _run_case(case) for name, case in CASES.items()}
        if rank == 0:
            results.update({name: {k: [t.clone() for t in ts] for k, ts in r.items()} for name, r in got.items()})
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)], ids=["world2", "world4"])
def run(request):
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        results = manager.dict()
        mp.start_processes(_worker, args=(request.param, _free_port(), results), nprocs=request.param, join=True,
                           start_method="spawn")
        return request.param, dict(results)


def test_reference_allows_what_the_cases_say():
    """The test's own masks, by hand at a few pairs (so that the reference itself is checked)."""
    win = _allowed(CASES["ulysses-causal-window"])
    assert win[5, 2] and win[5, 5] and not win[5, 1] and not win[5, 6]  # 3 before, causal cuts the 2 after
    lf = _allowed(CASES["ulysses-zigzag-causal-longformer-pad"])
    assert lf[15, 9] and lf[15, 0] and lf[9, 8] and not lf[9, 10] and not lf[12, 10]  # global key 9, causal
    st = _allowed(CASES["ring-zigzag-causal-strided"])
    assert st[10, 1] and st[10, 7] and st[10, 8] and not st[10, 6] and not st[10, 2] and not st[1, 10]


@pytest.mark.parametrize("name", list(CASES))
def test_with_autograd_matches_dense_float64(run, name):
    world, results = run
    for what, got, want in zip(("output", "grad q", "grad k", "grad v"), results[name]["grad"], _reference(CASES[name])):
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-10, err_msg=f"{name}, world {world}: {what}")


@pytest.mark.parametrize("name", list(CASES))
def test_without_autograd_matches_dense_float64(run, name):
    world, results = run
    np.testing.assert_allclose(results[name]["nograd"][0].numpy(), _reference(CASES[name])[0], rtol=0, atol=1e-10,
                               err_msg=f"{name}, world {world}: output under no_grad")
