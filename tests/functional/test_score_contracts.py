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


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((8, 4), (7, 6), (7,)), "w_q must have shape (7, 4) (W_q of the additive score, (d_a, d_q)); got (8, 4)"),
        (((7, 4), (7, 5), (7,)), "w_k must have shape (7, 6) (W_k of the additive score, (d_a, d_k)); got (7, 5)"),
        (((7, 4), (7, 6), (6,)), "v must have shape (7) (the additive score's vector v, (d_a,) with d_a = W_q's rows); got (6)"),
        (((7, 4), (7, 6), (7, 1)), "v must have shape (7) (the additive score's vector v, (d_a,) with d_a = W_q's rows); got (7, 1)"),
        (((7,), (7, 6), (7,)), "w_q must have shape (7, 4) (W_q of the additive score, (d_a, d_q)); got (7)"),
    ],
)
def test_additive_score_parameter_errors_word_for_word(shapes, message: str) -> None:
    w_q, w_k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        scores.additive(torch.randn(3, 4), torch.randn(5, 6), w_q, w_k, v)


def test_additive_score_records_its_five_steps_with_formulas_latex_and_numpy_values() -> None:
    rng = np.random.default_rng(12)
    q, k, w_q, w_k, v = (rng.normal(size=s) for s in ((2, 3, 4), (2, 5, 6), (7, 4), (7, 6), (7,)))
    with attnlab.trace() as tr:
        e = scores.additive(*(torch.tensor(a) for a in (q, k, w_q, w_k, v)))
    assert [(s.name, s.formula, s.latex) for s in tr] == [
        ("projected_query", "W_q q_i", "W_q q_i"),
        ("projected_keys", "W_k k_j", "W_k k_j"),
        ("preactivation", "W_q q_i + W_k k_j", "W_q q_i + W_k k_j"),
        ("tanh", "u_ij = tanh(W_q q_i + W_k k_j)", r"u_{ij} = \tanh(W_q q_i + W_k k_j)"),
        ("scores", "e_ij = vᵀ u_ij  (additive)", r"e_{ij} = v^\top u_{ij}"),
    ]
    pre = np.empty((2, 3, 5, 7))
    for b in range(2):
        for i in range(3):
            for j in range(5):
                pre[b, i, j] = w_q @ q[b, i] + w_k @ k[b, j]
    np.testing.assert_allclose(tr["projected_query"].value.numpy(), q @ w_q.T, rtol=1e-12)
    np.testing.assert_allclose(tr["projected_keys"].value.numpy(), k @ w_k.T, rtol=1e-12)
    np.testing.assert_allclose(tr["preactivation"].value.numpy(), pre, rtol=1e-12)
    np.testing.assert_allclose(tr["tanh"].value.numpy(), np.tanh(pre), rtol=1e-12)
    np.testing.assert_allclose(e.numpy(), np.tanh(pre) @ v, rtol=1e-12)
