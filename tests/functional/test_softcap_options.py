"""Soft-capping (Gemma 2, ê = c · tanh(e / c)) with each option of ``softcapped`` / ``softcap_attention``
against float64 NumPy written from the equation: an explicit scale, a callable score, dropout on the
weights, the defaults; the recorded step and the error messages.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.softcap import check_cap, softcap, softcap_attention, softcapped


def softmax(e):
    p = np.exp(e - e.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def inputs(seed=0, n_q=3, n_k=4, d=4, d_v=2):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n_q, d)) * 2, rng.normal(size=(n_k, d)) * 2, rng.normal(size=(n_k, d_v))


def test_an_explicit_scale_is_used_inside_the_cap():
    q, k, v = inputs()
    e = 2.0 * np.tanh(0.7 * (q @ k.T) / 2.0)  # scale 0.7, not 1/√4 = 0.5
    T = torch.tensor
    np.testing.assert_allclose(softcapped("scaled_dot", 2.0, scale=0.7)(T(q), T(k)).numpy(), e, rtol=1e-12)
    out, w = softcap_attention(T(q), T(k), T(v), cap=2.0, scale=0.7, need_weights=True)
    np.testing.assert_allclose(w.numpy(), softmax(e), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), softmax(e) @ v, rtol=1e-12)


def test_a_callable_score_is_capped_without_a_scale():
    q, k, v = inputs(1)
    T = torch.tensor
    fn = softcapped(lambda a, b: a @ b.transpose(-1, -2) * 0.25, 1.5)
    e = 1.5 * np.tanh((q @ k.T) * 0.25 / 1.5)
    np.testing.assert_allclose(fn(T(q), T(k)).numpy(), e, rtol=1e-12)
    out, _ = softcap_attention(T(q), T(k), T(v), cap=1.5, score=lambda a, b: a @ b.transpose(-1, -2) * 0.25)
    np.testing.assert_allclose(out.numpy(), softmax(e) @ v, rtol=1e-12)


def test_default_returns_no_weights():
    q, k, v = inputs(2)
    out, w = softcap_attention(*(torch.tensor(a) for a in (q, k, v)), cap=3.0)
    assert w is None
    e = 3.0 * np.tanh((q @ k.T) / 2.0 / 3.0)
    np.testing.assert_allclose(out.numpy(), softmax(e) @ v, rtol=1e-12)


def test_dropout_reaches_the_weights():
    # v = I: each output row is the dropped-out weights row, each entry 0 or α_ij / (1 − p);
    # over 2 · 40 · 30 entries about half are dropped
    torch.manual_seed(0)
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(2, 40, 4)), rng.normal(size=(2, 30, 4))
    T = torch.tensor
    out, w = softcap_attention(T(q), T(k), torch.eye(30, dtype=torch.float64).expand(2, 30, 30), cap=2.0,
                               dropout_p=0.5, need_weights=True)
    alpha = softmax(2.0 * np.tanh((q @ k.transpose(0, 2, 1)) / 2.0 / 2.0))
    np.testing.assert_allclose(w.numpy(), alpha, rtol=1e-12)  # the weights before dropout
    o = out.numpy()
    dropped = o == 0.0
    np.testing.assert_allclose(o[~dropped], 2.0 * alpha[~dropped], rtol=1e-12)
    assert 0.45 < dropped.mean() < 0.55


def test_softcap_records_its_step_with_the_cap_written_in():
    e = torch.tensor([[-9.0, 0.5, 3.0]], dtype=torch.float64)
    with attnlab.trace() as t:
        out = softcap(e, 2.5)
    assert [(s.name, s.formula, s.latex) for s in t] == [
        ("softcapped_scores", "ê_ij = 2.5 · tanh(e_ij / 2.5)", r"\hat e_{ij} = c \tanh(e_{ij} / c)")
    ]
    want = 2.5 * np.tanh(e.numpy() / 2.5)
    np.testing.assert_allclose(t["softcapped_scores"].value.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("cap", [True, False, 0, -1.0, float("nan"), "50", None])
def test_check_cap_refuses_what_is_not_a_positive_number(cap):
    with pytest.raises(ValueError, match=rf"^cap must be a positive number \(Gemma 2 uses 50.0 for attention\); got {re.escape(repr(cap))}$"):
        check_cap(cap)


def test_check_cap_accepts_ints_and_floats_as_float():
    assert check_cap(50) == 50.0 and isinstance(check_cap(50), float)
    assert check_cap(0.25) == 0.25


@pytest.mark.parametrize(
    "score, message",
    [
        ("dot", "scale applies to score='scaled_dot'; got score='dot' with scale set"),
        (lambda a, b: a @ b.transpose(-1, -2), "scale applies to score='scaled_dot' only; a callable score scales itself"),
    ],
)
def test_scale_with_another_score_is_refused(score, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        softcapped(score, 2.0, scale=0.5)


def test_an_unknown_score_is_refused_by_name():
    with pytest.raises(ValueError, match=re.escape("score must be 'scaled_dot', 'dot' or a callable (q, k) -> scores; got 'cosine'")):
        softcapped("cosine", 2.0)
