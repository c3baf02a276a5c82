"""The masking contract, as reusable checks for the mechanisms of issue 14 (soft-cap, linear,
differential, latent, neighbourhood, packed): masked keys/values never influence anything (NaN and
inf included), a fully masked row gives zeros with finite gradients, empty input gives empty output,
and the weights path equals the fast path.

``fn(q, k, v, key_mask, need_weights) -> (out, weights or None)`` with q (b, q, d), k (b, k, d),
v (b, k, d_v) and key_mask a bool (b, k) (True = may attend) or None.
"""

from __future__ import annotations

import torch


def masked_keys_never_influence(fn, b=2, q=5, k=7, d=8, dv=8, dtype=torch.float64, seed=0, params=()):
    """``params``: the leaves ``fn`` closes over (weights); their gradients must be finite and unchanged too."""
    g = torch.Generator().manual_seed(seed)
    qx, kx, vx = (torch.randn(b, n, m, generator=g, dtype=dtype) for n, m in ((q, d), (k, d), (k, dv)))
    mask = torch.ones(b, k, dtype=torch.bool)
    mask[0, [1, 4]] = False
    mask[1, -2:] = False

    def run(kk, vv):
        qq, kk, vv = (t.clone().requires_grad_() for t in (qx, kk, vv))
        out, _ = fn(qq, kk, vv, mask, False)
        grads = torch.autograd.grad(out.sum(), (qq, kk, vv, *params), allow_unused=True)
        return out, *grads

    base = run(kx, vx)
    dirty_k, dirty_v = kx.clone(), vx.clone()
    dirty_k[~mask] = float("nan")
    dirty_v[~mask] = float("inf")
    dirty = run(dirty_k, dirty_v)
    torch.testing.assert_close(dirty[0], base[0])
    torch.testing.assert_close(dirty[1], base[1])
    for i, (got, want) in enumerate(zip(dirty[4:], base[4:])):  # the weights' gradients
        assert torch.isfinite(got).all(), f"the gradient of params[{i}] is not finite"
        torch.testing.assert_close(got, want, msg=lambda m, i=i: f"params[{i}]: {m}")
    for got, want in zip(dirty[2:4], base[2:4]):  # gradients of the allowed keys and values
        if got is None and want is None:  # an input the mechanism does not read
            continue
        torch.testing.assert_close(got[mask], want[mask])
        assert torch.isfinite(got).all()


def fully_masked_row_is_zero(fn, b=2, q=3, k=4, d=8, dv=8, dtype=torch.float64):
    qx, kx, vx = (torch.randn(b, n, m, dtype=dtype, requires_grad=True) for n, m in ((q, d), (k, d), (k, dv)))
    mask = torch.ones(b, k, dtype=torch.bool)
    mask[1] = False
    out, _ = fn(qx, kx, vx, mask, False)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.sum().backward()
    for t in (qx, kx, vx):
        if t.grad is None:  # an input the mechanism does not read
            continue
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[1], torch.zeros_like(t.grad[1]))


def empty_input(fn, d=8, dv=8, dtype=torch.float64):
    for q, k in ((0, 4), (3, 0), (0, 0)):
        out, _ = fn(torch.randn(2, q, d, dtype=dtype), torch.randn(2, k, d, dtype=dtype), torch.randn(2, k, dv, dtype=dtype), None, False)
        assert out.shape == (2, q, dv)
        if q:
            assert torch.equal(out, torch.zeros_like(out))


def weights_equal_fast(fn, b=2, q=5, k=6, d=8, dv=8, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    qx, kx, vx = (torch.randn(b, n, m, generator=g, dtype=dtype) for n, m in ((q, d), (k, d), (k, dv)))
    mask = torch.rand(b, k, generator=g) > 0.3
    mask[:, 0] = True
    fast, none = fn(qx, kx, vx, mask, False)
    slow, w = fn(qx, kx, vx, mask, True)
    assert none is None and w is not None
    torch.testing.assert_close(slow, fast)
    return w


def all_contracts(fn, **kw):
    masked_keys_never_influence(fn, **kw)
    fully_masked_row_is_zero(fn)
    empty_input(fn)
    weights_equal_fast(fn)
