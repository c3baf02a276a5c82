"""Soft-capping with ``cap = inf`` means no cap (ê = e), not ``inf · tanh(e / inf)`` = NaN."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnlab import trace
from attnlab.functional.softcap import softcap, softcap_attention, softcapped
from attnlab.nn import create

import np_reference as npr


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, n, 4, generator=g, dtype=torch.float64) for n in (3, 5, 5)]


def test_the_step_with_an_infinite_cap_is_the_identity():
    e = torch.tensor([[-1e4, -3.0, 0.0, 0.5, 1e4]], dtype=torch.float64)
    with trace() as t:
        out = softcap(e, math.inf)
    assert out.tolist() == e.tolist() and out.data_ptr() != e.data_ptr()  # a copy, not the input
    assert t["softcapped_scores"].value.tolist() == e.tolist()


def test_an_infinite_cap_is_plain_attention_against_numpy():
    q, k, v = _inputs()
    allowed = np.ones((2, 3, 5), dtype=bool)
    allowed[1, :, 3:] = False
    want, want_w = npr.attention(q.numpy(), k.numpy(), v.numpy(), allowed=allowed)
    mask = torch.from_numpy(allowed)
    for need in (False, True):  # the fast path and the weights path
        out, w = softcap_attention(q, k, v, cap=math.inf, mask=mask, need_weights=need)
        np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)
        if need:
            np.testing.assert_allclose(w.numpy(), want_w, rtol=0, atol=1e-12)
    module, _ = create("softcap", cap=math.inf)(q, k, v, mask=mask)
    np.testing.assert_allclose(module.numpy(), want, rtol=0, atol=1e-12)


def test_an_infinite_cap_keeps_the_score_options():
    q, k, v = _inputs(1)
    want, _ = npr.attention(q.numpy(), k.numpy(), v.numpy(), scores_fn=lambda a, b: npr.scaled_dot(a, b, 0.7))
    out, _ = softcap_attention(q, k, v, cap=math.inf, scale=0.7)
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)
    want, _ = npr.attention(q.numpy(), k.numpy(), v.numpy(), scores_fn=npr.dot)
    out, _ = softcap_attention(q, k, v, cap=math.inf, score="dot")
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)
    fn = softcapped(lambda a, b: a @ b.transpose(-1, -2) * 0.25, math.inf)
    np.testing.assert_allclose(fn(q, k).numpy(), npr.dot(q.numpy(), k.numpy()) * 0.25, rtol=0, atol=1e-12)


def test_an_infinite_cap_gives_finite_gradients_equal_to_plain_attention():
    q, k, v = (t.requires_grad_() for t in _inputs(2))
    out, _ = softcap_attention(q, k, v, cap=math.inf, causal=True, need_weights=True)
    out.sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    e = (q2 @ k2.transpose(-1, -2)) / 2.0  # √d = 2
    e = e.masked_fill(torch.ones(3, 5, dtype=torch.bool).tril(2).logical_not(), float("-inf"))  # bottom-right causal
    (torch.softmax(e, -1) @ v2).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        assert torch.isfinite(a.grad).all()
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-12)
