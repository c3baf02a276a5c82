"""Linear attention (Katharopoulos et al. 2020): which form runs for which mask, the parallel form's
recorded steps against float64 NumPy from eq. 5, and a general (per query) bool mask against a loop.

    s_ij = φ(q_i)ᵀ φ(k_j)  (0 where j is not allowed),  α_ij = s_ij / Σ_j' s_ij',  V'_i = Σ_j α_ij v_j
    φ(x) = elu(x) + 1

The linear form (no n × n tensor, nothing recorded) runs for no mask or a key mask (..., 1, k)
without ``need_weights`` or ``causal``; every other bool mask runs the parallel form, which
records its steps while a trace is active.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.linear import feature_similarities, linear_attention


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


def masked_loop(q, k, v, allowed):
    """Eq. 5 over the allowed keys, one query at a time; q (n_q, d), k (n_k, d), v (n_k, d_v), allowed (n_q, n_k)."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for i in range(q.shape[0]):
        s = np.array([phi(q[i]) @ phi(k[j]) if allowed[i, j] else 0.0 for j in range(k.shape[0])])
        out[i] = s @ v / s.sum() if s.sum() > 0 else 0.0
    return out


@pytest.mark.parametrize("n_q", [2, 3])
def test_a_per_query_mask_matches_the_loop(n_q):
    # a (1, q, k) mask that differs from row to row: not a key mask, whatever its leading dims
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, n_q, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 3))
    allowed = np.array([[1, 0, 1, 1, 0], [0, 1, 0, 0, 1], [1, 1, 0, 0, 0]], dtype=bool)[:n_q]
    T = torch.tensor
    out, w = linear_attention(T(q), T(k), T(v), mask=T(allowed)[None])
    assert w is None
    for b in range(2):
        np.testing.assert_allclose(out[b].numpy(), masked_loop(q[b], k[b], v[b], allowed), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mask_shape", [None, (1, 5), (2, 1, 5)])
def test_no_mask_or_a_key_mask_takes_the_linear_form_and_records_nothing(mask_shape):
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 3))
    keep = np.ones((2, 5), dtype=bool)
    keep[0, 1] = keep[1, 3] = False
    mask = None
    if mask_shape is not None:
        keep = keep[:1] if mask_shape[0] == 1 else keep
        mask = torch.tensor(keep).reshape(mask_shape)
    with attnlab.trace() as t:
        out, _ = linear_attention(*(torch.tensor(a) for a in (q, k, v)), mask=mask)
    assert t.names() == []
    for b in range(2):
        allowed = np.broadcast_to(keep[b if keep.shape[0] == 2 else 0], (3, 5)) if mask is not None else np.ones((3, 5), bool)
        np.testing.assert_allclose(out[b].numpy(), masked_loop(q[b], k[b], v[b], allowed), rtol=1e-12)


@pytest.mark.parametrize("how", ["need_weights", "causal", "full_mask"])
def test_weights_causal_or_a_full_mask_take_the_parallel_form_and_record_its_steps(how):
    rng = np.random.default_rng(2)
    q, k, v = rng.normal(size=(1, 4, 2)), rng.normal(size=(1, 4, 2)), rng.normal(size=(1, 4, 3))
    allowed = np.ones((4, 4), dtype=bool)
    kwargs = {}
    if how == "need_weights":
        kwargs["need_weights"] = True
    elif how == "causal":
        kwargs["causal"] = True
        allowed = np.tril(allowed)
    else:
        allowed = np.array([[1, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=bool)
        kwargs["mask"] = torch.tensor(allowed)
    with attnlab.trace() as t:
        out, _ = linear_attention(*(torch.tensor(a) for a in (q, k, v)), **kwargs)
    assert t.names() == ["query_features", "key_features", "similarities", "weights", "context"]
    np.testing.assert_allclose(out[0].numpy(), masked_loop(q[0], k[0], v[0], allowed), rtol=1e-12)


def test_parallel_steps_match_numpy_and_show_the_papers_formulas():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(3, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 5))
    allowed = np.array([[1, 1, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0]], dtype=bool)
    with attnlab.trace() as t:
        out, w = linear_attention(*(torch.tensor(a) for a in (q, k, v)), mask=torch.tensor(allowed), need_weights=True)
    fq, fk = phi(q), phi(k)
    sim = np.where(allowed, fq @ fk.T, 0.0)
    alpha = sim / sim.sum(-1, keepdims=True)
    assert [(s.name, s.formula, s.latex) for s in t] == [
        ("query_features", "φ(q_i), φ(x) = elu(x) + 1", r"\phi(q_i)"),
        ("key_features", "φ(k_j), φ(x) = elu(x) + 1", r"\phi(k_j)"),
        ("similarities", "s_ij = φ(q_i)ᵀ φ(k_j)", r"s_{ij} = \phi(q_i)^\top \phi(k_j)"),
        ("weights", "α_ij = s_ij / Σ_j' s_ij'", r"\alpha_{ij} = s_{ij} / \sum_{j'} s_{ij'}"),
        ("context", "c_i = Σ_j α_ij v_j", r"c_i = \sum_j \alpha_{ij} v_j"),
    ]
    for name, want in [("query_features", fq), ("key_features", fk), ("similarities", sim), ("weights", alpha),
                       ("context", alpha @ v)]:
        np.testing.assert_allclose(t[name].value.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(w.numpy(), alpha, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), alpha @ v, rtol=1e-12, atol=1e-12)


def test_a_custom_feature_map_is_shown_as_phi():
    # φ(x) = x² + 1 (positive): the steps name it φ(x), and the numbers follow it
    rng = np.random.default_rng(4)
    q, k, v = rng.normal(size=(2, 3)), rng.normal(size=(3, 3)), rng.normal(size=(3, 2))
    with attnlab.trace() as t:
        out, _ = linear_attention(*(torch.tensor(a) for a in (q, k, v)), feature_map=lambda x: x * x + 1.0,
                                  need_weights=True)
    assert t["query_features"].formula == "φ(q_i), φ(x) = φ(x)"
    assert t["key_features"].formula == "φ(k_j), φ(x) = φ(x)"
    s = (q * q + 1.0) @ (k * k + 1.0).T
    np.testing.assert_allclose(out.numpy(), (s / s.sum(-1, keepdims=True)) @ v, rtol=1e-12)


def test_feature_similarities_keeps_the_features_dtype_and_zeroes_forbidden_pairs():
    # integer features (counts): φ(q)ᵀφ(k) by hand, the forbidden pair 0, and still int64
    fq = torch.tensor([[1, 2], [3, 0]])
    fk = torch.tensor([[2, 1], [0, 4], [1, 1]])
    allowed = torch.tensor([[True, False, True], [True, True, False]])
    sim = feature_similarities(fq, fk, allowed)
    assert sim.dtype == torch.int64
    assert sim.tolist() == [[4, 0, 3], [6, 0, 0]]
