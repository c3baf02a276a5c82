"""The masking contract, as reusable checks for the modern mechanisms (soft-cap, linear,
differential, latent, neighbourhood, packed): masked keys/values never influence anything (NaN and
inf included), a fully masked row gives zeros with finite gradients, empty input gives empty output,
and the weights path equals the fast path.

``fn(q, k, v, key_mask, need_weights) -> (out, weights or None)`` with q (b, q, d), k (b, k, d),
v (b, k, d_v) and key_mask a bool (b, k) (True = may attend) or None. The rules are
``attnlab.testing.rules``' functions, the ones ``attnlab.testing.check`` applies.
"""

from __future__ import annotations

import torch

from attnlab.testing.rules import finite_gradients, has_shape, rows_zero, untouched


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
    planted, atol = "NaN in a masked key or inf in a masked value", 1e-5 if dtype == torch.float32 else 1e-7
    untouched(planted, "the output", dirty[0], base[0], atol)
    untouched(planted, "the gradient of q", dirty[1], base[1], atol)
    for i, (got, want) in enumerate(zip(dirty[4:], base[4:])):  # the weights' gradients
        untouched(planted, f"the gradient of params[{i}]", got, want, atol)
    for name, got, want in zip("kv", dirty[2:4], base[2:4]):  # gradients of the allowed keys and values
        if got is None and want is None:  # an input the mechanism does not read
            continue
        untouched(planted, f"the gradient of {name}", got, None)
        untouched(planted, f"the gradient of the allowed {name}", got[mask], want[mask], atol)


def fully_masked_row_is_zero(fn, b=2, q=3, k=4, d=8, dv=8, dtype=torch.float64):
    qx, kx, vx = (torch.randn(b, n, m, dtype=dtype, requires_grad=True) for n, m in ((q, d), (k, d), (k, dv)))
    mask = torch.ones(b, k, dtype=torch.bool)
    mask[1] = False
    out, _ = fn(qx, kx, vx, mask, False)
    rows_zero(out[1])
    out.sum().backward()
    grads = {name: t.grad for name, t in zip("qkv", (qx, kx, vx)) if t.grad is not None}  # inputs it reads
    finite_gradients(grads, "fully masked row")
    for name, g in grads.items():
        rows_zero(g[1], what=f"the gradient of {name} in a fully masked row")


def empty_input(fn, d=8, dv=8, dtype=torch.float64):
    for q, k in ((0, 4), (3, 0), (0, 0)):
        out, _ = fn(torch.randn(2, q, d, dtype=dtype), torch.randn(2, k, d, dtype=dtype), torch.randn(2, k, dv, dtype=dtype), None, False)
        has_shape(out, (2, q, dv))
        if q:
            rows_zero(out, what="a row with no keys")


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
