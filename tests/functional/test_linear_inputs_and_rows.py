"""Linear attention (Katharopoulos et al. 2020, eq. 5) at its edges, against a float64 NumPy loop:
a mask over broadcast leading dims, small normalisers, a fully masked row whose query is NaN,
integer inputs with an integer feature map, the defaults, and the input checks' messages.

    V'_i = Σ_j s_ij v_j / Σ_j s_ij,  s_ij = φ(q_i)ᵀ φ(k_j) over the allowed keys,  φ = elu + 1
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.functional.linear import linear_attention


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


def loop(q, k, v, allowed=None, feature=phi):
    """Eq. 5 per query: q (n_q, d), k (n_k, d), v (n_k, d_v), allowed (n_q, n_k) or None."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        s = np.array([feature(q[i]) @ feature(k[j]) for j in range(k.shape[0])], dtype=np.float64)
        if allowed is not None:
            s = np.where(allowed[i], s, 0.0)
        out[i] = s @ v / s.sum() if s.sum() > 0 else 0.0
    return out


@pytest.mark.parametrize("q_lead, k_lead", [((2,), (1,)), ((1,), (2,))])
@pytest.mark.parametrize("full", [False, True])
def test_a_mask_over_broadcast_leading_dims_is_accepted(q_lead, k_lead, full):
    # the mask has the broadcast batch (2); one of query, key has batch 1
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(*q_lead, 3, 4)), rng.normal(size=(*k_lead, 5, 4))
    v = rng.normal(size=(*k_lead, 5, 2))
    if full:  # a per-query mask: the parallel form
        allowed = rng.random((2, 3, 5)) > 0.4
        allowed[..., 0] = True
    else:  # a key mask: the linear form
        allowed = np.broadcast_to(np.array([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1]], dtype=bool)[:, None, :], (2, 1, 5))
    T = torch.tensor
    out, _ = linear_attention(T(q), T(k), T(v), mask=T(np.ascontiguousarray(allowed)))
    assert out.shape == (2, 3, 2)
    for b in range(2):
        qb, kb, vb = q[b % q.shape[0]], k[b % k.shape[0]], v[b % v.shape[0]]
        want = loop(qb, kb, vb, np.broadcast_to(allowed[b], (3, 5)))
        np.testing.assert_allclose(out[b].numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"need_weights": True}])
def test_a_normaliser_below_one_still_divides(kwargs):
    # q, k ≈ −4: φ ≈ e^−4, so φ(q)ᵀ Σ φ(k) ≈ 1e-3 (well below 1) and the output is still Σ α v
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(3, 2)) * 0.1 - 4.0, rng.normal(size=(3, 2)) * 0.1 - 4.0
    v = rng.normal(size=(3, 2))
    out, _ = linear_attention(*(torch.tensor(a) for a in (q, k, v)), **kwargs)
    allowed = np.tril(np.ones((3, 3), bool)) if kwargs.get("causal") else None
    want = loop(q, k, v, allowed)
    assert (phi(q) @ phi(k).T).sum(-1).max() < 0.01
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_fully_masked_row_is_zero_even_when_its_query_is_nan(need_weights):
    # row 1 may attend nothing: zero (the contract), although its query holds a NaN; the other rows are as in the loop
    rng = np.random.default_rng(2)
    q, k, v = rng.normal(size=(3, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 3))
    allowed = np.array([[1, 1, 0, 1], [0, 0, 0, 0], [1, 0, 1, 0]], dtype=bool)
    q_nan = q.copy()
    q_nan[1, 0] = np.nan
    out, _ = linear_attention(*(torch.tensor(a) for a in (q_nan, k, v)), mask=torch.tensor(allowed), need_weights=need_weights)
    want = loop(q, k, v, allowed)
    assert (out[1] == 0).all()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)


def test_integer_valued_inputs_with_a_polynomial_feature_map_through_a_key_mask():
    # φ(x) = x² + 1 on integer values: the similarities are exact integers, the output their weighted mean
    q = torch.tensor([[1, 0], [2, 1]], dtype=torch.float64)
    k = torch.tensor([[0, 1], [1, 1], [2, 0]], dtype=torch.float64)
    v = torch.tensor([[3, 0], [0, 6], [9, 3]], dtype=torch.float64)
    keep = torch.tensor([[True, True, False]])
    out, _ = linear_attention(q, k, v, mask=keep, feature_map=lambda x: x * x + 1)
    # s = φ(q) φ(k)ᵀ over keys 0, 1: row 0: φ(q)=(2,1), φ(k0)=(1,2), φ(k1)=(2,2) → 4, 6; row 1: (5,2) → 9, 14
    want = np.array([[4 * np.array([3, 0]) + 6 * np.array([0, 6])], [9 * np.array([3, 0]) + 14 * np.array([0, 6])]])[:, 0]
    want = want / np.array([[10.0], [23.0]])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


def test_default_is_non_causal_and_returns_no_weights():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 4))
    out, w = linear_attention(*(torch.tensor(a) for a in (q, k, v)))
    assert w is None
    np.testing.assert_allclose(out.numpy(), loop(q, k, v), rtol=1e-12)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_a_one_dimensional_input_is_refused_by_name(which):
    args = {"query": torch.randn(2, 3), "key": torch.randn(4, 3), "value": torch.randn(4, 5)}
    args[which] = args[which][0]
    got = f"({args[which].shape[0]})"
    with pytest.raises(ValueError, match=rf"^{which} must have at least 2 dimensions; got shape {re.escape(got)}$"):
        linear_attention(**args)


@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_a_non_tensor_input_is_refused_by_name(which):
    args = {"query": torch.randn(2, 3), "key": torch.randn(4, 3), "value": torch.randn(4, 5)}
    args[which] = args[which].tolist()
    with pytest.raises(ValueError, match=rf"^{which} must be a torch.Tensor; got list$"):
        linear_attention(**args)


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape",
    [((1, 2, 3), (1, 4, 3), (1, 5, 2)),  # k ≠ k of the values, d equal
     ((1, 2, 3), (1, 4, 6), (1, 4, 2))],  # d of the query ≠ d of the key, k equal
)
def test_mismatched_shapes_are_named_in_the_message(q_shape, k_shape, v_shape):
    fmt = lambda s: "(" + ", ".join(map(str, s)) + ")"  # noqa: E731
    msg = (f"linear attention needs query (..., q, d), key (..., k, d) and value (..., k, d_v); got "
           f"query {fmt(q_shape)}, key {fmt(k_shape)}, value {fmt(v_shape)}")
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        linear_attention(torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape))
