"""Ring attention's backward recomputes each block's weights from the saved row log-sum-exp: its
gradients match whole-sequence attention, and what it saves for the backward is O(n/W · d), never a
block's (n/W)² weights.

Two gloo processes, spawned here. The reference is written in this file: whole-sequence masked
softmax attention in float64 torch with autograd (scores, −∞ where masked, a row with no key gives
zero weights), on the clean inputs. The workers' inputs hold NaN in the keys and inf in the values
at padded positions, which must reach neither an output nor a gradient. Both block routes run: the
fused CPU flash kernels, and the explicit one (``flash.HAS_FUSED`` switched off, as on a torch build
without them or on another device); and the causal calls cut into tiles of 3 positions (which do not
line up with the zigzag's chunks of 4: partial overlaps) and of 2 (which do).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from gloo_processes import run_in_processes

from attnlab import patterns as P

B, H, N, D = 2, 2, 16, 3
BIG_N, BIG_D = 256, 4  # the saved-tensor check: a shard of 128 rows, so (n/W)² = 16,384 ≫ n/W · d = 512

CASES = {
    f"{layout}-{'causal' if causal else 'full'}-{'pad' if pad else 'nopad'}": dict(
        layout=layout, causal=causal, pad=pad, strided=False)
    for layout, causal, pad in itertools.product(("contiguous", "zigzag"), (True, False), (True, False))
}
CASES["zigzag-causal-strided-pad"] = dict(layout="zigzag", causal=True, pad=True, strided=True)
ROUTES = ("fused", "explicit", "fused-tiles-3", "fused-tiles-2")  # tiles: causal calls of at most 3 (2) positions


def _inputs():
    g = torch.Generator().manual_seed(5)
    q, k, v, up = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(4))
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[0, [4, 11]] = False
    pad[1, [0, 1, 9, 15]] = False  # causal: query 0 of sequence 1 has no key at all
    return q, k, v, up, pad


def _allow(case) -> torch.Tensor:
    """(B, 1, N, N) bool, True = query i may attend key j, from the definitions (not the library's)."""
    i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
    allow = torch.ones(B, 1, N, N, dtype=torch.bool)
    if case["strided"]:
        allow &= ((i - j).abs() < 3) | ((i - j) % 3 == 0)
    if case["causal"]:
        allow &= j <= i
    if case["pad"]:
        allow &= _inputs()[4][:, None, None, :]
    return allow


def _reference(case):
    """Whole-sequence float64 attention with autograd → (out, dq, dk, dv) for the upstream gradient ``up``."""
    q, k, v, up, _ = _inputs()
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    allow = _allow(case)
    live = allow.any(-1, keepdim=True)
    s = (q @ k.transpose(-1, -2) / D**0.5).masked_fill(~allow, float("-inf")).masked_fill(~live, 0.0)
    w = torch.softmax(s, -1) * allow  # a row with no key: zero weights
    out = w @ v
    (out * up).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


def _kwargs(case, layout_pad):
    pattern = P.strided(3) if case["strided"] else None
    return dict(causal=case["causal"], pattern=pattern, mode="ring", layout=case["layout"], mask=layout_pad)


def _run_case(case):
    from attnlab.distributed import context_parallel_attention, gather, shard

    q, k, v, up, pad = _inputs()
    lay = case["layout"]
    if case["pad"]:  # what the mask hides holds NaN and inf
        k[~pad[:, None, :].expand(B, H, N)] = float("nan")
        v[~pad[:, None, :].expand(B, H, N)] = float("inf")
    kw = _kwargs(case, shard(pad, dim=-1, layout=lay) if case["pad"] else None)
    ql, kl, vl = (shard(t, layout=lay).clone().requires_grad_() for t in (q, k, v))
    out, _ = context_parallel_attention(ql, kl, vl, **kw)
    (out * shard(up, layout=lay)).sum().backward()
    return [gather(t.detach(), layout=lay) for t in (out, ql.grad, kl.grad, vl.grad)]


def _saved_sizes(case):
    """The element counts of every tensor autograd saves for the backward of one call (n = BIG_N)."""
    from attnlab.distributed import context_parallel_attention, shard

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, BIG_N, BIG_D, generator=g) for _ in range(3))
    pad = torch.ones(1, BIG_N, dtype=torch.bool)
    pad[0, 7] = False
    lay = case["layout"]
    kw = _kwargs(case, shard(pad, dim=-1, layout=lay) if case["pad"] else None)
    ql, kl, vl = (shard(t, layout=lay).clone().requires_grad_() for t in (q, k, v))
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out, _ = context_parallel_attention(ql, kl, vl, **kw)
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (ql, kl, vl))
    return sizes


def _every_route() -> dict:
    from attnlab.distributed import ring
    from attnlab.kernels import flash

    got = {}
    for route in ROUTES:
        flash.HAS_FUSED = route != "explicit" and flash.FLASH is not None
        ring.TILE = int(route.rsplit("-", 1)[1]) if "tiles" in route else 1024
        got.update({(route, name): _run_case(case) for name, case in CASES.items()})
        got.update({(route, "saved", name): _saved_sizes(case) for name, case in CASES.items()})
    return {key: [t.clone() if isinstance(t, torch.Tensor) else t for t in r] for key, r in got.items()}


@pytest.fixture(scope="module")
def results():
    return run_in_processes(_every_route, world=2)


def test_reference_masks_what_the_cases_say():
    allow = _allow(CASES["zigzag-causal-strided-pad"])
    assert allow[0, 0, 10, 9] and allow[0, 0, 10, 1] and not allow[0, 0, 10, 6] and not allow[0, 0, 10, 11]
    assert not allow[0, 0, 12, 4] and not allow[1, 0, 0].any() and allow[1, 0, 2, 2]
    out, dq, dk, dv = _reference(CASES["contiguous-causal-pad"])
    assert torch.equal(out[1, :, 0], torch.zeros(H, D)) and torch.equal(dq[1, :, 0], torch.zeros(H, D))
    assert torch.equal(dv[1, :, 9], torch.zeros(H, D))  # a padded key's gradient
    # the last query of sequence 0 may attend every key but the padded ones: plain softmax there
    q, k, v, _, pad = _inputs()
    w = torch.softmax(q[0, 0, -1] @ k[0, 0, pad[0]].T / D**0.5, -1)
    torch.testing.assert_close(out[0, 0, -1], w @ v[0, 0, pad[0]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", list(CASES))
def test_gradients_match_whole_sequence_float64(results, route, name):
    for what, got, want in zip(("output", "grad q", "grad k", "grad v"), results[(route, name)], _reference(CASES[name])):
        assert torch.isfinite(got).all(), f"{route} {name}: {what}"
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10, msg=f"{route} {name}: {what}")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", list(CASES))
def test_backward_saves_no_block_of_weights(results, route, name):
    """Every saved tensor is at most a shard of q (n/W · d elements), far below a block's (n/W)²."""
    sizes = results[(route, "saved", name)]
    shard_rows = BIG_N // 2
    assert sizes, "nothing saved: the call did not build a graph"
    assert max(sizes) <= shard_rows * BIG_D, f"{route} {name}: saved tensors of {sorted(set(sizes))} elements"
