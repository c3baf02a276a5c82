"""Score functions against the float64 NumPy reference, and their shape errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab

import np_reference as ref

dims = st.integers(1, 5)


def t(x):
    return torch.tensor(x, dtype=torch.float64)


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 3), q=dims, k=dims, d=dims, seed=st.integers(0, 2**31 - 1))
def test_dot_and_scaled_dot(b, q, k, d, seed):
    rng = np.random.default_rng(seed)
    Q, K = rng.normal(size=(b, q, d)), rng.normal(size=(b, k, d))
    np.testing.assert_allclose(attnlab.scores.dot(t(Q), t(K)).numpy(), ref.dot(Q, K), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(attnlab.scores.scaled_dot(t(Q), t(K)).numpy(), ref.scaled_dot(Q, K), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        attnlab.scores.scaled_dot(t(Q), t(K), scale=0.3).numpy(), ref.scaled_dot(Q, K, 0.3), rtol=1e-12, atol=1e-12
    )


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 2), q=dims, k=dims, dq=dims, dk=dims, da=dims, seed=st.integers(0, 2**31 - 1))
def test_general_additive_concat(b, q, k, dq, dk, da, seed):
    rng = np.random.default_rng(seed)
    Q, K = rng.normal(size=(b, q, dq)), rng.normal(size=(b, k, dk))
    W = rng.normal(size=(dq, dk))
    Wq, Wk, v = rng.normal(size=(da, dq)), rng.normal(size=(da, dk)), rng.normal(size=(da,))
    Wc = rng.normal(size=(da, dq + dk))
    np.testing.assert_allclose(attnlab.scores.general(t(Q), t(K), t(W)).numpy(), ref.general(Q, K, W), atol=1e-12)
    np.testing.assert_allclose(
        attnlab.scores.additive(t(Q), t(K), t(Wq), t(Wk), t(v)).numpy(), ref.additive(Q, K, Wq, Wk, v), atol=1e-12
    )
    np.testing.assert_allclose(
        attnlab.scores.concat(t(Q), t(K), t(Wc), t(v)).numpy(), ref.concat(Q, K, Wc, v), atol=1e-12
    )


def test_seed_000_additive_scores():
    h = t([[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]])
    s = t([[0.6, -0.2]])
    W1, W2, v = t([[0.1, 0.2], [0.3, 0.4]]), t([[0.5, 0.6], [0.7, 0.8]]), t([1.0, 2.0])
    e = attnlab.scores.additive(s, h, W1, W2, v)[0]
    np.testing.assert_allclose(e.numpy(), [1.527, 0.969, 0.880], atol=5e-4)
    assert abs(float(e[1]) - 1.32) > 0.3  # the text's 1.32 is wrong


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: attnlab.scores.dot(torch.randn(2, 3, 4), torch.randn(2, 5, 3)), ["(2, 3, 4)", "(2, 5, 3)", "d=4", "d=3"]),
        (lambda: attnlab.scores.general(torch.randn(3, 4), torch.randn(5, 6), torch.randn(6, 4)), ["weight", "(4, 6)", "(6, 4)"]),
        (
            lambda: attnlab.scores.additive(torch.randn(3, 4), torch.randn(5, 6), torch.randn(7, 4), torch.randn(7, 5), torch.randn(7)),
            ["w_k", "(7, 6)", "(7, 5)"],
        ),
        (
            lambda: attnlab.scores.additive(torch.randn(3, 4), torch.randn(5, 6), torch.randn(8, 4), torch.randn(7, 6), torch.randn(7)),
            ["w_q", "(7, 4)", "(8, 4)"],
        ),
        (
            lambda: attnlab.scores.concat(torch.randn(3, 4), torch.randn(5, 6), torch.randn(7, 9), torch.randn(7)),
            ["weight", "(7, 10)", "(7, 9)"],
        ),
        (lambda: attnlab.scores.dot(torch.randn(4), torch.randn(3, 4)), ["query", "at least 2", "(4)"]),
    ],
)
def test_score_shape_errors_name_the_shapes(call, words):
    with pytest.raises(ValueError) as e:
        call()
    for w in words:
        assert w in str(e.value)
