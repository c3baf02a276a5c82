"""A fully masked query row whose raw scores overflow still gives zero weights, a zero output and finite
gradients (the contract), on both paths of ``attention`` and in ``masked_softmax``.

Found by the mutation round: the row used to be "opened" onto its raw scores, so a query of 1e38 (or
junk in a float16 padding row) made its softmax NaN; the output was zeroed afterwards, but the NaN
weights were returned under autograd and NaN · 0 reached every gradient.

The reference: the same call with the dead row's query set to 0 (nothing overflows then). A fully
masked row contributes nothing, so every other output, weight and gradient must be the same, and the
dead row's own output, weights and query gradient must be zero. The outputs are also checked against
the float64 NumPy reference of ``tests/np_reference.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab import masked_softmax
from attnlab.functional import attention

import np_reference as ref

NEG = float("-inf")


def _inputs(dtype=torch.float32, big=1e38):
    q = torch.tensor([[[0.5, -1.0], [big, big], [1.0, 0.25]]], dtype=dtype)
    k = torch.tensor([[[10.0, 10.0], [1.0, 2.0], [-1.0, 0.5], [0.0, 1.0]]], dtype=dtype)
    v = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, -1.0], [0.5, 0.5]]], dtype=dtype)
    allow = torch.tensor([[True, False, True, True], [False] * 4, [True, True, False, True]])
    return q, k, v, allow


def _run(q, k, v, mask, score, need_weights):
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, w = attention(q, k, v, mask=mask, score=score, need_weights=need_weights)
    (out * torch.arange(1.0, 1.0 + out.numel()).view_as(out)).sum().backward()
    return out.detach(), (None if w is None else w.detach()), q.grad, k.grad, v.grad


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_fully_masked_row_with_overflowing_scores_has_zero_weights_and_finite_gradients(kind, score, need_weights):
    q, k, v, allow = _inputs()
    mask = allow if kind == "bool" else torch.zeros(allow.shape).masked_fill(~allow, NEG)
    out, w, gq, gk, gv = _run(q, k, v, mask, score, need_weights)
    q0 = q.clone()
    q0[0, 1] = 0.0  # the same call without the overflow
    out0, w0, gq0, gk0, gv0 = _run(q0, k, v, mask, score, need_weights)

    for g in (gq, gk, gv):
        assert torch.isfinite(g).all()
    assert out[0, 1].tolist() == [0.0, 0.0] and gq[0, 1].tolist() == [0.0, 0.0]
    torch.testing.assert_close(out, out0)
    torch.testing.assert_close(gq, gq0)
    torch.testing.assert_close(gk, gk0)
    torch.testing.assert_close(gv, gv0)
    if need_weights:
        assert w[0, 1].tolist() == [0.0] * 4
        torch.testing.assert_close(w, w0)

    fn = ref.dot if score == "dot" else ref.scaled_dot
    q64 = q0.double().numpy()
    want_out, want_w = ref.attention(q64, k.double().numpy(), v.double().numpy(), fn, allowed=allow.numpy())
    np.testing.assert_allclose(out.double().numpy(), want_out, rtol=1e-5, atol=1e-6)
    if need_weights:
        np.testing.assert_allclose(w.double().numpy(), want_w, rtol=1e-5, atol=1e-6)


def test_a_float16_padding_row_of_junk_scored_with_dot_gives_finite_gradients():
    # junk of 300 in a padding query row: 300 · 300 · 2 = 180000 overflows float16 (max 65504)
    q, k, v, allow = _inputs(torch.float16, big=300.0)
    k = k.clone()
    k[0, 0] = 300.0
    out, w, gq, gk, gv = _run(q, k, v, allow, "dot", True)
    assert out[0, 1].tolist() == [0.0, 0.0] and w[0, 1].tolist() == [0.0] * 4
    for g in (gq, gk, gv):
        assert torch.isfinite(g).all()
    assert gq[0, 1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masked_softmax_of_an_infinite_fully_masked_row_is_zero_with_zero_gradient(kind):
    s = torch.tensor([[1.0, 2.0, 3.0], [float("inf"), float("inf"), 1.0]], requires_grad=True)
    allow = torch.tensor([[True, False, True], [False, False, False]])
    mask = allow if kind == "bool" else torch.zeros(3).masked_fill(~allow, NEG)
    w = masked_softmax(s, mask)
    e1, e3 = np.exp(1.0), np.exp(3.0)
    np.testing.assert_allclose(w.detach().numpy(), [[e1 / (e1 + e3), 0.0, e3 / (e1 + e3)], [0.0, 0.0, 0.0]], rtol=1e-6)
    (w * torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum().backward()
    assert torch.isfinite(s.grad).all()
    assert s.grad[1].tolist() == [0.0, 0.0, 0.0] and s.grad[0, 1].item() == 0.0


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_fully_masked_row_beside_huge_keys_has_finite_gradients(need_weights):
    # keys of 2e38: the allowed rows' tiny queries keep their scores finite, but any query of order 1
    # in the fully masked row would give 2e38 + 2e38 = inf; the row is opened onto a zero query
    q = torch.tensor([[[1e-3, 1e-3], [1.0, 1.0], [-1e-3, 2e-3]]])
    k = torch.tensor([[[2e38, 2e38], [1.0, 2.0], [-1.0, 0.5], [0.0, 1.0]]])
    v = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [3.0, -1.0], [0.5, 0.5]]])
    _, _, _, allow = _inputs()
    out, w, gq, gk, gv = _run(q, k, v, allow, "dot", need_weights)
    for g in (gq, gk, gv):
        assert torch.isfinite(g).all()
    assert out[0, 1].tolist() == [0.0, 0.0] and gq[0, 1].tolist() == [0.0, 0.0]
    want_out, _ = ref.attention(q.double().numpy(), k.double().numpy(), v.double().numpy(), ref.dot, allowed=allow.numpy())
    np.testing.assert_allclose(out.double().numpy(), want_out, rtol=1e-5, atol=1e-6)
