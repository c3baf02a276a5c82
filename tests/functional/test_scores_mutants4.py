"""The dot and additive scores called directly: each input check's message word for word.

The messages are the contract ("name what was given and what was expected"), so each case
names the argument, its shape or dtype, and what the score needed, written out by hand here.
"""

from __future__ import annotations

import re

import pytest
import torch

from attnlab.functional import scores

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
            "query, key must share one dtype; got query torch.float32, key torch.float64 (convert with .to(dtype))",
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
