"""Score functions against the float64 NumPy reference, and their shape errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab
from attnlab.functional import scores

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


# The dot and additive scores called directly: each input check's message word for word.
#
# The messages are the contract ("name what was given and what was expected"), so each case
# names the argument, its shape or dtype, and what the score needed, written out by hand here.
FLOAT_KINDS = "(float16, bfloat16, float32 or float64)"


def _raises(call, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        call()


@pytest.mark.parametrize(
    "q, k, message",
    [
        (torch.randn(4), torch.randn(3, 4), "query must have at least 2 dimensions; got shape (4)"),
        ([[1.0]], torch.randn(3, 1), "query must be a torch.Tensor; got list"),
        # a 1-d key with the query's feature size: only the key's own check can name it
        (torch.randn(3, 4), torch.randn(4), "key must have at least 2 dimensions; got shape (4)"),
        (torch.randn(3, 4), [[1.0] * 4], "key must be a torch.Tensor; got list"),
        (
            torch.randint(0, 3, (3, 4)),
            torch.randn(5, 4),
            f"query must be a floating-point tensor {FLOAT_KINDS}; got dtype torch.int64",
        ),
        (
            torch.randn(3, 4),
            torch.randint(0, 3, (5, 4)),
            f"key must be a floating-point tensor {FLOAT_KINDS}; got dtype torch.int64",
        ),
        (
            torch.randn(3, 4),
            torch.randn(5, 4, dtype=torch.float64),
            "query, key must share one dtype; got query torch.float32, key torch.float64 (convert with .to(dtype))",
        ),
        (torch.randn(3, 0), torch.randn(5, 0), "query must have at least one feature (d >= 1); got shape (3, 0)"),
        (torch.randn(3, 4), torch.randn(5, 0), "key must have at least one feature (d >= 1); got shape (5, 0)"),
        (
            torch.randn(2, 3, 4),
            torch.randn(2, 5, 3),
            "the dot score needs query and key feature sizes to match: query (2, 3, 4) has d=4, key (2, 5, 3) has d=3 "
            "(use the 'general', 'additive' or 'concat' score for different sizes)",
        ),
    ],
)
def test_dot_score_errors_word_for_word(q, k, message: str) -> None:
    _raises(lambda: scores.dot(q, k), message)


def _additive(q=None, k=None, w_q=None, w_k=None, v=None):
    q = torch.randn(3, 4) if q is None else q
    k = torch.randn(5, 6) if k is None else k
    w_q = torch.randn(7, 4) if w_q is None else w_q
    w_k = torch.randn(7, 6) if w_k is None else w_k
    v = torch.randn(7) if v is None else v
    return lambda: scores.additive(q, k, w_q, w_k, v)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            _additive(q=torch.randint(0, 3, (3, 4))),
            f"query must be a floating-point tensor {FLOAT_KINDS}; got dtype torch.int64",
        ),
        (
            _additive(k=torch.randint(0, 3, (5, 6))),
            f"key must be a floating-point tensor {FLOAT_KINDS}; got dtype torch.int64",
        ),
        (
            _additive(k=torch.randn(5, 6, dtype=torch.float64)),
            "query, key, w_q, w_k, v must share one dtype; got query torch.float32, key torch.float64, "
            "w_q torch.float32, w_k torch.float32, v torch.float32 (convert with .to(dtype))",
        ),
        (_additive(w_q=[[1.0] * 4] * 7), "w_q must be a torch.Tensor; got list"),
        (_additive(w_q=torch.tensor(1.0)), "w_q must have at least 1 dimensions; got shape ()"),
        (_additive(w_k=[[1.0] * 6] * 7), "w_k must be a torch.Tensor; got list"),
        (_additive(w_k=torch.tensor(1.0)), "w_k must have at least 1 dimensions; got shape ()"),
        (_additive(v=[1.0] * 7), "v must be a torch.Tensor; got list"),
        (_additive(v=torch.tensor(1.0)), "v must have at least 1 dimensions; got shape ()"),
    ],
)
def test_additive_score_dtype_and_parameter_type_errors_word_for_word(call, message: str) -> None:
    _raises(call, message)
