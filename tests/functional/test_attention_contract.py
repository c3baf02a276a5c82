"""``attnlab.attention``'s contract in full: every error message word for word (what was given, what was
expected), and the traced steps (names, formulas, LaTeX, notes) with their values against float64 NumPy."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab

r = torch.randn
Q, K, V = r(2, 4, 8), r(2, 5, 8), r(2, 5, 6)


def _dot(a, b):
    return a @ b.transpose(-1, -2)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((Q, K, V), dict(score=_dot, scale=0.5), "scale applies to score='scaled_dot' only; a callable score scales itself"),
        ((Q, K, V), dict(score="dot", scale=0.5), "scale applies to score='scaled_dot'; got score='dot' with scale set"),
        (
            (Q, K, V),
            dict(score="luong"),
            "score must be 'dot', 'scaled_dot' or a callable (q, k) -> scores; got 'luong'. For general, additive or "
            "concat scores pass e.g. functools.partial(attnlab.scores.additive, ...)",
        ),
        ((Q, K, r(2, 6, 6)), {}, "key and value must have the same length k: key (2, 5, 8) has k=5, value (2, 6, 6) has k=6"),
        ((r(8), K, V), {}, "query must have at least 2 dimensions; got shape (8)"),
        ((Q, r(5), V), {}, "key must have at least 2 dimensions; got shape (5)"),
        ((Q, K, r(6)), {}, "value must have at least 2 dimensions; got shape (6)"),
        (
            (Q.int(), K, V),
            {},
            "query must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype torch.int32",
        ),
        (
            (Q, K.double(), V),
            {},
            "query, key, value must share one dtype; got query torch.float32, key torch.float64, value torch.float32 "
            "(convert with .to(dtype))",
        ),
        ((r(2, 4, 0), r(2, 5, 0), V), {}, "query must have at least one feature (d >= 1); got shape (2, 4, 0)"),
        ((Q, r(2, 5, 0), V), {}, "key must have at least one feature (d >= 1); got shape (2, 5, 0)"),
        (
            (Q, r(2, 5, 7), V),
            {},
            "the scaled_dot score needs query and key feature sizes to match: query (2, 4, 8) has d=8, key (2, 5, 7) "
            "has d=7 (use the 'general', 'additive' or 'concat' score for different sizes)",
        ),
        (
            (Q, r(2, 5, 7), V),
            dict(score="dot"),
            "the dot score needs query and key feature sizes to match: query (2, 4, 8) has d=8, key (2, 5, 7) has d=7 "
            "(use the 'general', 'additive' or 'concat' score for different sizes)",
        ),
        ((Q, K, V), dict(dropout_p=1.0), "dropout_p must be in [0, 1); got 1.0"),
        ((Q, K, V), dict(dropout_p=-0.1), "dropout_p must be in [0, 1); got -0.1"),
        ((Q, K, V), dict(scale=0.0), "scale must be a finite positive number (or None for 1/sqrt(d)); got 0.0"),
        (
            (r(3, 4, 8), K, V),
            {},
            "batch dimensions (all but the last two) do not broadcast: query (3, 4, 8), key (2, 5, 8), value (2, 5, 6)",
        ),
    ],
)
def test_attention_errors_word_for_word(args, kwargs, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        attnlab.attention(*args, **kwargs)


def test_callable_score_with_different_feature_sizes_is_not_checked_for_matching_features() -> None:
    """The feature checks are the dot scores' own: a callable (here qᵀ W k) may take other sizes."""
    q, k, v, w = r(1, 2, 3, dtype=torch.float64), r(1, 4, 5, dtype=torch.float64), r(1, 4, 2, dtype=torch.float64), r(3, 5, dtype=torch.float64)
    out, weights = attnlab.attention(q, k, v, score=lambda a, b: a @ w @ b.transpose(-1, -2), need_weights=True)
    e = q.numpy()[0] @ w.numpy() @ k.numpy()[0].T
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    np.testing.assert_allclose(weights.numpy()[0], a, rtol=1e-12)
    np.testing.assert_allclose(out.numpy()[0], a @ v.numpy()[0], rtol=1e-12)


def test_dropout_p_zero_is_allowed() -> None:
    out, _ = attnlab.attention(Q, K, V, dropout_p=0.0)
    ref, _ = attnlab.attention(Q, K, V)
    torch.testing.assert_close(out, ref)


def np_softmax(e, allowed=None):
    e = np.where(allowed, e, -np.inf) if allowed is not None else e
    a = np.exp(e - e.max(-1, keepdims=True))
    return a / a.sum(-1, keepdims=True)


CORE_TAIL = [
    ("weights", "α_ij = exp(e_ij) / Σ_j' exp(e_ij')", r"\alpha_{ij} = \frac{\exp(e_{ij})}{\sum_{j'} \exp(e_{ij'})}", ""),
    ("context", "c_i = Σ_j α_ij v_j", r"c_i = \sum_j \alpha_{ij} v_j", ""),
]
SCORES = ("scores", "e_ij = q_iᵀ k_j", r"e_{ij} = q_i^\top k_j", "")


def _trace(**kwargs):
    rng = np.random.default_rng(9)
    q, k, v = rng.normal(size=(2, 4, 8)), rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 6))
    with attnlab.trace() as tr:
        out, w = attnlab.attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), need_weights=True, **kwargs)
    return tr, (q, k, v), out.numpy(), w.numpy()


def test_trace_of_the_default_score_with_a_bool_mask() -> None:
    allowed = np.array([True, False, True, True, False]).reshape(1, 1, 5)
    tr, (q, k, v), out, w = _trace(mask=torch.tensor(allowed))
    assert [(s.name, s.formula, s.latex, s.note) for s in tr] == [
        SCORES,
        ("scaled_scores", "e_ij = q_iᵀ k_j · 0.353553  (= 1/√d)", r"e_{ij} = \frac{q_i^\top k_j}{\sqrt{d}}", ""),
        ("masked_scores", "e_ij ← −∞ where the mask forbids j", r"e_{ij} \leftarrow -\infty \text{ where masked}",
         "16 of 40 scores masked"),
        *CORE_TAIL,
    ]
    e = q @ k.swapaxes(-1, -2)
    np.testing.assert_allclose(tr["scores"].value.numpy(), e, rtol=1e-12)
    np.testing.assert_allclose(tr["scaled_scores"].value.numpy(), e / np.sqrt(8), rtol=1e-12)
    np.testing.assert_allclose(
        tr["masked_scores"].value.numpy(), np.where(allowed, e / np.sqrt(8), -np.inf), rtol=1e-12
    )
    alpha = np_softmax(e / np.sqrt(8), allowed)
    for got in (tr["weights"].value.numpy(), w):
        np.testing.assert_allclose(got, alpha, rtol=1e-12, atol=1e-15)
    for got in (tr["context"].value.numpy(), out):
        np.testing.assert_allclose(got, alpha @ v, rtol=1e-12)


def test_trace_with_a_float_bias_and_a_given_scale() -> None:
    bias = np.zeros((1, 1, 5))
    bias[..., 1] = -np.inf
    bias[..., 3] = 0.75
    tr, (q, k, v), out, w = _trace(mask=torch.tensor(bias), scale=0.25)
    assert [(s.name, s.formula, s.latex, s.note) for s in tr] == [
        SCORES,
        ("scaled_scores", "e_ij = q_iᵀ k_j · 0.25", r"e_{ij} = 0.25\, q_i^\top k_j", ""),
        ("masked_scores", "e_ij ← e_ij + bias_ij", r"e_{ij} \leftarrow -\infty \text{ where masked}", "8 of 40 scores masked"),
        *CORE_TAIL,
    ]
    e = q @ k.swapaxes(-1, -2) * 0.25
    np.testing.assert_allclose(tr["masked_scores"].value.numpy(), e + bias, rtol=1e-12)
    alpha = np_softmax(e + bias)
    np.testing.assert_allclose(w, alpha, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out, alpha @ v, rtol=1e-12)


def test_trace_of_the_dot_score_without_a_mask_has_no_scaling_or_masking_step() -> None:
    tr, (q, k, v), out, w = _trace(score="dot")
    assert [(s.name, s.formula, s.latex, s.note) for s in tr] == [SCORES, *CORE_TAIL]
    alpha = np_softmax(q @ k.swapaxes(-1, -2))
    np.testing.assert_allclose(w, alpha, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(out, alpha @ v, rtol=1e-12)


def _np_attention(q, k, v, e, allowed=None):
    alpha = np_softmax(e, allowed)
    return alpha @ v, alpha


def test_callable_score_without_need_weights_returns_no_weights() -> None:
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 2))
    out, w = attnlab.attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), score=_dot)
    assert w is None
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, q @ k.swapaxes(-1, -2))[0], rtol=1e-12)


def test_callable_score_in_another_dtype_gives_the_context_in_the_values_dtype() -> None:
    """A score function may compute in float64 for float32 inputs: the weights are cast to the values' dtype."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((1, 3, 4), (1, 5, 4), (1, 5, 2)))
    out, w = attnlab.attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(v), score=lambda a, b: a.double() @ b.double().transpose(-1, -2),
        need_weights=True,
    )
    assert out.dtype == torch.float32
    ref, alpha = _np_attention(q, k, v, q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2))
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), alpha, rtol=1e-6, atol=1e-7)


def test_a_score_tensor_returned_by_a_callable_is_never_overwritten() -> None:
    """The reference path may work in place only in scores it made itself, not in what a callable returns."""
    rng = np.random.default_rng(3)
    e = torch.tensor(rng.normal(size=(1, 3, 5)))
    before = e.clone()
    v = torch.tensor(rng.normal(size=(1, 5, 2)))
    q, k = torch.zeros(1, 3, 4, dtype=torch.float64), torch.zeros(1, 5, 4, dtype=torch.float64)
    for mask in (None, torch.tensor([True, True, False, True, True]).view(1, 1, 5)):
        for need in (False, True):
            out, _ = attnlab.attention(q, k, v, score=lambda a, b: e, mask=mask, need_weights=need)
            assert torch.equal(e, before)
            allowed = None if mask is None else mask.numpy()
            np.testing.assert_allclose(out.numpy(), _np_attention(None, None, v.numpy(), e.numpy(), allowed)[0], rtol=1e-12)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("score, scale, factor", [("dot", None, 1.0), ("scaled_dot", None, 1 / np.sqrt(4)), ("scaled_dot", 0.3, 0.3)])
def test_both_paths_scale_as_told_with_query_length_unlike_feature_size(need_weights, score, scale, factor) -> None:
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 2))
    out, _ = attnlab.attention(
        torch.tensor(q), torch.tensor(k), torch.tensor(v), score=score, scale=scale, need_weights=need_weights
    )
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, q @ k.swapaxes(-1, -2) * factor)[0], rtol=1e-10)


@pytest.mark.parametrize("need_weights", [False, True])
def test_keys_broadcast_over_the_queries_batch(need_weights) -> None:
    rng = np.random.default_rng(5)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(1, 5, 4)), rng.normal(size=(1, 5, 2))
    out, w = attnlab.attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), need_weights=need_weights)
    ref, alpha = _np_attention(q, k, v, q @ k.swapaxes(-1, -2) / 2.0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10)
    if need_weights:
        np.testing.assert_allclose(w.numpy(), alpha, rtol=1e-10)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_positive_infinity_in_a_masked_key_changes_nothing(need_weights) -> None:
    """+inf in a key the bias forbids: q·k would be +inf, and +inf + (−inf) NaN, unless the key is zeroed first."""
    rng = np.random.default_rng(6)
    q, k, v = np.abs(rng.normal(size=(1, 3, 4))) + 0.1, rng.normal(size=(1, 5, 4)), rng.normal(size=(1, 5, 2))
    bias = np.zeros((1, 1, 5))
    bias[..., 2] = -np.inf
    q[..., 0] = 5.0  # 5 · 0.5 · (the largest float64) overflows: +inf where the key were kept as its largest value
    k_bad, v_bad = k.copy(), v.copy()
    k_bad[0, 2, 0] = np.inf
    v_bad[0, 2, 1] = np.inf
    out, _ = attnlab.attention(
        torch.tensor(q), torch.tensor(k_bad), torch.tensor(v_bad), mask=torch.tensor(bias), need_weights=need_weights
    )
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, q @ k.swapaxes(-1, -2) / 2.0 + bias)[0], rtol=1e-10)
