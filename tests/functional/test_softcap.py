"""Soft-capping (Gemma 2) against a float64 reference written from the equation, gradients included."""

from __future__ import annotations

import math

import contract_modern as contract
import pytest
import torch

from attnlab import attention
from attnlab.functional.softcap import softcap, softcap_attention, softcapped
from attnlab.nn import create


def reference(q, k, v, cap, allowed):
    """ê = c·tanh(qᵀk/√d / c); softmax over allowed keys (rows with none: zeros); o = α v."""
    e = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    e = cap * torch.tanh(e / cap)
    e = e.masked_fill(~allowed, float("-inf"))
    m = e.amax(-1, keepdim=True).clamp(min=-1e300)
    p = torch.exp(e - m).masked_fill(~allowed, 0.0)
    s = p.sum(-1, keepdim=True)
    w = torch.where(s > 0, p / s.clamp(min=1e-300), torch.zeros_like(p))
    return w @ v, w


def test_softcap_step_and_bounds():
    x = torch.tensor([-1e4, -3.0, 0.0, 0.5, 1e4], dtype=torch.float64)
    torch.testing.assert_close(softcap(x, 2.0), 2.0 * torch.tanh(x / 2.0))
    assert softcap(x, 2.0).abs().max() <= 2.0
    with pytest.raises(ValueError, match="cap"):
        softcap(x, 0.0)


@pytest.mark.parametrize("cap", [0.5, 5.0, 50.0])
def test_values_and_gradients_against_reference(cap):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, dtype=torch.float64) * 3 for n in (5, 7, 7))
    allowed = torch.rand(2, 1, 5, 7) > 0.3
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    out, w = softcap_attention(*args, cap=cap, mask=allowed, need_weights=True)
    ref_args = [t.clone().requires_grad_() for t in (q, k, v)]
    ref_out, ref_w = reference(*ref_args, cap, allowed)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(w, ref_w.expand_as(w))
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref_out * g).sum().backward()
    for a, r in zip(args, ref_args):
        torch.testing.assert_close(a.grad, r.grad)


def test_large_cap_is_plain_attention_and_callable_wrapper():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 4, 8, dtype=torch.float64) for _ in range(3))
    plain, _ = attention(q, k, v, causal=True)
    capped, _ = attention(q, k, v, score=softcapped("scaled_dot", 1e6), causal=True)
    torch.testing.assert_close(capped, plain)
    dot = softcapped("dot", 3.0)
    torch.testing.assert_close(dot(q, k), 3.0 * torch.tanh(q @ k.transpose(-1, -2) / 3.0))


def test_contract():
    m = create("softcap", cap=2.0)

    def fn(q, k, v, key_mask, need_weights):
        mask = None if key_mask is None else key_mask[:, None, :]
        return m(q, k, v, mask=mask, need_weights=need_weights)

    contract.all_contracts(fn)
