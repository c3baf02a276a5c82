"""The recurrent form of linear attention (Katharopoulos et al. 2020, eqs. 18–20) on 3-D inputs with
n ≠ d ≠ d_v, broadcast leading dims and zero new tokens, against a float64 NumPy recurrence:

    S_i = S_{i−1} + φ(K_i) V_iᵀ,   z_i = z_{i−1} + φ(K_i),   V'_i = φ(Q_i)ᵀ S_i / φ(Q_i)ᵀ z_i,
    φ(x) = elu(x) + 1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.functional.linear import LinearState, linear_attention_step


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


def recurrence(q, k, v, s0=None, z0=None):
    """Eqs. 18–20 token by token for one sequence: q (n, d), k (n, d), v (n, d_v) → (out, S, z)."""
    d, dv = q.shape[-1], v.shape[-1]
    s = np.zeros((d, dv)) if s0 is None else s0.copy()
    z = np.zeros(d) if z0 is None else z0.copy()
    out = []
    for i in range(q.shape[0]):
        s = s + np.outer(phi(k[i]), v[i])
        z = z + phi(k[i])
        out.append(phi(q[i]) @ s / (phi(q[i]) @ z))
    return np.array(out).reshape(q.shape[0], dv), s, z


def test_three_d_inputs_with_distinct_sizes_match_the_recurrence():
    # b = 2, n = 5 tokens, d = 3, d_v = 4: every size different, so an axis mix-up changes shapes or sums
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 5, 4))
    out, state = linear_attention_step(*(torch.tensor(t) for t in (q, k, v)))
    assert out.shape == (2, 5, 4)
    assert state.s.shape == (2, 3, 4) and state.z.shape == (2, 3) and state.length == 5
    for b in range(2):
        want, s, z = recurrence(q[b], k[b], v[b])
        np.testing.assert_allclose(out[b].numpy(), want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.s[b].numpy(), s, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(state.z[b].numpy(), z, rtol=1e-12, atol=1e-12)


def test_state_length_counts_tokens_across_calls():
    # 2 then 3 tokens on (1, n, 4) inputs: the length is 2, then 5 (not the feature size 4)
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(1, 5, 4)), rng.normal(size=(1, 5, 4)), rng.normal(size=(1, 5, 2))
    T = torch.tensor
    a, st = linear_attention_step(T(q[:, :2]), T(k[:, :2]), T(v[:, :2]))
    assert st.length == 2
    b, st = linear_attention_step(T(q[:, 2:]), T(k[:, 2:]), T(v[:, 2:]), st)
    assert st.length == 5
    want, s, z = recurrence(q[0], k[0], v[0])
    np.testing.assert_allclose(torch.cat([a, b], -2)[0].numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.s[0].numpy(), s, rtol=1e-12, atol=1e-12)


def test_given_state_continues_the_recurrence():
    rng = np.random.default_rng(2)
    s0, z0 = rng.uniform(0.5, 1.5, size=(3, 2)), rng.uniform(0.5, 1.5, size=3)
    q, k, v = rng.normal(size=(1, 4, 3)), rng.normal(size=(1, 4, 3)), rng.normal(size=(1, 4, 2))
    T = torch.tensor
    out, st = linear_attention_step(T(q), T(k), T(v), LinearState(T(s0)[None], T(z0)[None], 7))
    want, s, z = recurrence(q[0], k[0], v[0], s0, z0)
    np.testing.assert_allclose(out[0].numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st.z[0].numpy(), z, rtol=1e-12, atol=1e-12)
    assert st.length == 11


@pytest.mark.parametrize(
    "q_lead, k_lead, lead",
    [((2,), (2,), (2,)), ((2, 1), (1, 3), (2, 3)), ((1,), (3,), (3,)), ((4,), (1,), (4,))],
)
def test_zero_new_tokens_give_empty_output_and_zero_state_of_the_broadcast_shape(q_lead, k_lead, lead):
    # d = 3, d_v = 5: the empty output is (*lead, 0, d_v), S (*lead, d, d_v) and z (*lead, d) all zero
    q = torch.randn(*q_lead, 0, 3, dtype=torch.float64)
    k = torch.randn(*k_lead, 0, 3, dtype=torch.float64)
    v = torch.randn(*k_lead, 0, 5, dtype=torch.float64)
    out, st = linear_attention_step(q, k, v)
    assert out.shape == (*lead, 0, 5) and out.dtype == torch.float64
    assert st.s.shape == (*lead, 3, 5) and st.z.shape == (*lead, 3) and st.length == 0
    assert not st.s.any() and not st.z.any()


def test_broadcast_leading_dims_match_the_recurrence_per_pair():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(2, 1, 3, 2)), rng.normal(size=(1, 3, 3, 2)), rng.normal(size=(1, 3, 3, 4))
    out, st = linear_attention_step(*(torch.tensor(t) for t in (q, k, v)))
    assert out.shape == (2, 3, 3, 4) and st.s.shape == (2, 3, 2, 4) and st.z.shape == (2, 3, 2)
    for i in range(2):
        for j in range(3):
            want, s, z = recurrence(q[i, 0], k[0, j], v[0, j])
            np.testing.assert_allclose(out[i, j].numpy(), want, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(st.s[i, j].numpy(), s, rtol=1e-12, atol=1e-12)


def test_one_key_per_query_error_names_both_lengths():
    # q = 2 tokens, k = 4 tokens, d = 3, d_v = 5, batch 1: the message gives 2 and 4, nothing else
    q, k, v = torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 5)
    with pytest.raises(ValueError, match=r"^the recurrent form takes one key per query; got q=2, k=4$"):
        linear_attention_step(q, k, v)
