"""The functional multi-head latent attention (DeepSeek-V2, eqs. 10–11 and 16–18) against float64 NumPy
written from the equations: its steps, defaults and the input checks' messages.

    k_j,i^C = (W^UK c_j^KV)_i,  v_j,i^C = (W^UV c_j^KV)_i,  q_t,i = [q_t,i^C; q_t,i^R],  k_j,i = [k_j,i^C; k_j^R]
    o_t,i = Σ_j softmax_j(q_t,iᵀ k_j,i / √(d_h + d_R)) v_j,i^C
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.latent import latent_attention


def softmax(e):
    p = np.exp(e - e.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def make(seed=0, b=2, h=2, n_q=3, n_k=4, d_h=3, d_r=2, d_c=5, d_v=2):
    rng = np.random.default_rng(seed)
    return dict(q_content=rng.normal(size=(b, h, n_q, d_h)), q_rope=rng.normal(size=(b, h, n_q, d_r)),
                c_kv=rng.normal(size=(b, n_k, d_c)), k_rope=rng.normal(size=(b, n_k, d_r)),
                w_uk=rng.normal(size=(h * d_h, d_c)), w_uv=rng.normal(size=(h * d_v, d_c)))


def reference(a, h):
    """Per batch and head: up-project, join the rotary parts, softmax over all keys, weight the values."""
    b, n_k, _ = a["c_kv"].shape
    d_h, d_v = a["w_uk"].shape[0] // h, a["w_uv"].shape[0] // h
    k_c = (a["c_kv"] @ a["w_uk"].T).reshape(b, n_k, h, d_h).transpose(0, 2, 1, 3)
    v = (a["c_kv"] @ a["w_uv"].T).reshape(b, n_k, h, d_v).transpose(0, 2, 1, 3)
    q = np.concatenate([a["q_content"], a["q_rope"]], -1)
    k = np.concatenate([k_c, np.broadcast_to(a["k_rope"][:, None], (b, h, n_k, a["k_rope"].shape[-1]))], -1)
    w = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
    return w @ v, w, k_c, v, q, k


def test_steps_and_output_match_numpy_with_defaults_non_causal_and_no_weights():
    a = make()
    with attnlab.trace() as t:
        out, w = latent_attention(**{k: torch.tensor(x) for k, x in a.items()}, num_heads=2)
    assert w is None
    want, _, k_c, v, q, k = reference(a, 2)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    assert t.names()[:4] == ["content_keys", "value_heads", "query_heads", "key_heads"]
    assert [(s.formula, s.latex) for s in t][:4] == [
        ("k_j^C = W^UK c_j^KV", r"k_j^C = W^{UK} c_j^{KV}"),
        ("v_j^C = W^UV c_j^KV", r"v_j^C = W^{UV} c_j^{KV}"),
        ("q_i = [q_i^C; q_i^R]", r"q_i = [q_i^C; q_i^R]"),
        ("k_j = [k_j^C; k_j^R]", r"k_j = [k_j^C; k_j^R]"),
    ]
    for name, value in [("content_keys", k_c), ("value_heads", v), ("query_heads", q), ("key_heads", k)]:
        np.testing.assert_allclose(t[name].value.numpy(), value, rtol=1e-12, atol=1e-12, err_msg=name)


def test_weights_on_request():
    a = make(1)
    out, w = latent_attention(**{k: torch.tensor(x) for k, x in a.items()}, num_heads=2, need_weights=True)
    want, want_w, *_ = reference(a, 2)
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, dims", [("q_content", 4), ("q_rope", 4), ("c_kv", 3), ("k_rope", 3)])
def test_an_input_with_the_wrong_number_of_dimensions_is_refused_by_name(name, dims):
    a = {k: torch.tensor(x) for k, x in make(2).items()}
    a[name] = a[name][0]
    got = "(" + ", ".join(map(str, a[name].shape)) + ")"
    with pytest.raises(ValueError, match=rf"^{name} must have {dims} dimensions; got shape {re.escape(got)}$"):
        latent_attention(**a, num_heads=2)


@pytest.mark.parametrize("name", ["q_content", "q_rope", "c_kv", "k_rope"])
def test_a_non_tensor_input_is_refused_by_name(name):
    a = {k: torch.tensor(x) for k, x in make(3).items()}
    a[name] = a[name].tolist()
    with pytest.raises(ValueError, match=rf"^{name} must be a torch.Tensor; got list$"):
        latent_attention(**a, num_heads=2)
