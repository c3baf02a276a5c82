"""Luong's general and concat scores: their error messages (the contract: what was given, what was expected),
their traced steps (names, formulas, LaTeX) and their values against float64 NumPy."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional import scores


def _concat(q_shape, k_shape, w_shape, v_shape):
    return lambda: scores.concat(torch.randn(q_shape), torch.randn(k_shape), torch.randn(w_shape), torch.randn(v_shape))


@pytest.mark.parametrize(
    "call, message",
    [
        (_concat((4,), (5, 6), (7, 10), (7,)), "query must have at least 2 dimensions; got shape (4)"),
        (_concat((3, 4), (6,), (7, 10), (7,)), "key must have at least 2 dimensions; got shape (6)"),
        (_concat((3, 4), (5, 6), (7, 10), ()), "v must have at least 1 dimensions; got shape ()"),
        (
            _concat((3, 4), (5, 6), (7, 10), (7, 2)),
            "v must have shape (7) (the concat score's vector v, (d_a,)); got (7, 2)",
        ),
        (
            _concat((3, 4), (5, 6), (7, 9), (7,)),
            "weight must have shape (7, 10) (W of the concat score, (d_a, d_q + d_k)); got (7, 9)",
        ),
    ],
)
def test_concat_score_errors_name_the_argument_its_shape_and_the_expected_shape(call, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        call()


def test_concat_score_records_its_formula_and_the_values_of_numpy() -> None:
    rng = np.random.default_rng(3)
    q, k, w, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 6)), rng.normal(size=(7, 10)), rng.normal(size=7)
    with attnlab.trace() as tr:
        e = scores.concat(*(torch.tensor(a) for a in (q, k, w, v)))
    ref = np.array([[v @ np.tanh(w @ np.concatenate([q[i], k[j]])) for j in range(5)] for i in range(3)])
    np.testing.assert_allclose(e.numpy(), ref, rtol=1e-12)
    np.testing.assert_allclose(tr["scores"].value.numpy(), ref, rtol=1e-12)
    assert tr["scores"].formula == "e_ij = vᵀ u_ij  (concat: W [q; k] = W_q q + W_k k)"


def _general(q_shape, k_shape, w_shape):
    return lambda: scores.general(torch.randn(q_shape), torch.randn(k_shape), torch.randn(w_shape))


@pytest.mark.parametrize(
    "call, message",
    [
        (_general((4,), (5, 6), (4, 6)), "query must have at least 2 dimensions; got shape (4)"),
        (lambda: scores.general([[1.0]], torch.randn(5, 6), torch.randn(1, 6)), "query must be a torch.Tensor; got list"),
        (_general((3, 4), (6,), (4, 6)), "key must have at least 2 dimensions; got shape (6)"),
        (lambda: scores.general(torch.randn(3, 4), [[1.0]], torch.randn(4, 1)), "key must be a torch.Tensor; got list"),
        (_general((3, 4), (5, 6), (6, 4)), "weight must have shape (4, 6) (W of the general score, (d_q, d_k)); got (6, 4)"),
    ],
)
def test_general_score_errors_name_the_argument_its_shape_and_the_expected_shape(call, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        call()


def test_general_score_records_projected_keys_and_scores_with_their_formulas() -> None:
    rng = np.random.default_rng(5)
    q, k, w = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 6)), rng.normal(size=(4, 6))
    with attnlab.trace() as tr:
        e = scores.general(*(torch.tensor(a) for a in (q, k, w)))
    ref = np.einsum("bqa,ac,bkc->bqk", q, w, k)  # e_ij = q_iᵀ W k_j
    np.testing.assert_allclose(e.numpy(), ref, rtol=1e-12)
    assert [(st.name, st.formula, st.latex) for st in tr] == [
        ("projected_keys", "W k_j", "W k_j"),
        ("scores", "e_ij = q_iᵀ W k_j", r"e_{ij} = q_i^\top W k_j"),
    ]
    np.testing.assert_allclose(tr["projected_keys"].value.numpy(), k @ w.T, rtol=1e-12)
    np.testing.assert_allclose(tr["scores"].value.numpy(), ref, rtol=1e-12)


@pytest.mark.parametrize(
    "q, k, message",
    [
        (torch.randn(4), torch.randn(5, 6), "query must have at least 2 dimensions; got shape (4)"),
        ([[1.0]], torch.randn(5, 6), "query must be a torch.Tensor; got list"),
        (torch.randn(3, 4), torch.randn(6), "key must have at least 2 dimensions; got shape (6)"),
        (torch.randn(3, 4), [[1.0]], "key must be a torch.Tensor; got list"),
    ],
)
def test_additive_score_errors_name_the_query_or_key_and_its_shape(q, k, message: str) -> None:
    d_q = q.shape[-1] if isinstance(q, torch.Tensor) else 1
    d_k = k.shape[-1] if isinstance(k, torch.Tensor) else 1
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        scores.additive(q, k, torch.randn(7, d_q), torch.randn(7, d_k), torch.randn(7))
