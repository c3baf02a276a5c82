"""Integer or mixed dtypes given to linear, multi-head and latent attention raise a TypeError naming
the tensors and their dtypes (not PyTorch's RuntimeError from deep inside); linear attention with
no features (d = 0) is a ValueError, as in the core; float64 inputs still give the NumPy values."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.functional.latent import latent_attention
from attnlab.functional.linear import linear_attention, linear_attention_step
from attnlab.functional.multihead import multi_head_attention

FLOATING = "must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype "


def _qkv():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 5, 4, generator=g) for _ in range(3))


LINEAR = {
    "linear_attention": lambda q, k, v: linear_attention(q, k, v),
    "linear_attention causal": lambda q, k, v: linear_attention(q, k, v, causal=True),
    "linear_attention_step": lambda q, k, v: linear_attention_step(q, k, v),
}


@pytest.mark.parametrize("entry", list(LINEAR))
@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: (q.long(), k, v), "query " + FLOATING + "torch.int64"),
    (lambda q, k, v: (q, k.int(), v), "key " + FLOATING + "torch.int32"),
    (lambda q, k, v: (q, k, v.bool()), "value " + FLOATING + "torch.bool"),
    (lambda q, k, v: (q.double(), k, v), "query, key, value must share one dtype; got query torch.float64, key torch.float32, value torch.float32"),
    (lambda q, k, v: (q, k, v.half()), "query, key, value must share one dtype; got query torch.float32, key torch.float32, value torch.float16"),
])
def test_linear_attention_integer_or_mixed_dtypes_are_a_type_error(entry, change, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        LINEAR[entry](*change(*_qkv()))


@pytest.mark.parametrize("entry", list(LINEAR))
def test_linear_attention_without_features_is_a_value_error(entry):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=re.escape("query must have at least one feature (d >= 1); got shape (2, 5, 0)")):
        LINEAR[entry](q[..., :0], k[..., :0], v)


def test_linear_attention_refuses_a_mask_that_is_not_a_tensor():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=re.escape("mask must be a torch.Tensor; got list")):
        linear_attention(q, k, v, mask=[[True] * 5])


def test_linear_attention_of_float64_inputs_against_numpy():
    q, k, v = (t.double() for t in _qkv())
    phi = lambda x: np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))  # noqa: E731  elu(x) + 1
    fq, fk = phi(q.numpy()), phi(k.numpy())
    s = fq @ fk.transpose(0, 2, 1)  # (b, q, k)
    want = (s / s.sum(-1, keepdims=True)) @ v.numpy()
    np.testing.assert_allclose(linear_attention(q, k, v)[0].numpy(), want, rtol=1e-12, atol=1e-12)


def _mha_args():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 8, generator=g)
    w = {n: torch.randn(8, 8, generator=g) for n in ("w_q", "w_k", "w_v", "w_o")}
    return x, w


@pytest.mark.parametrize("name", ["w_q", "w_k", "w_v", "w_o", "b_o"])
def test_multi_head_attention_weights_of_another_dtype_are_a_type_error_naming_them(name):
    x, w = _mha_args()
    if name == "b_o":
        w["b_o"] = torch.zeros(8, dtype=torch.float64)
    else:
        w[name] = w[name].double()
    with pytest.raises(TypeError, match=re.escape("must share one dtype; got query torch.float32") + ".*"
                       + re.escape(f"{name} torch.float64")):
        multi_head_attention(x, x, x, w, num_heads=2)


def test_multi_head_attention_integer_weights_are_a_type_error():
    x, w = _mha_args()
    w["w_k"] = w["w_k"].long()
    with pytest.raises(TypeError, match=re.escape("w_k " + FLOATING + "torch.int64")):
        multi_head_attention(x, x, x, w, num_heads=2)


def _latent_args():
    g = torch.Generator().manual_seed(2)
    return dict(q_content=torch.randn(2, 2, 3, 4, generator=g), q_rope=torch.randn(2, 2, 3, 2, generator=g),
                c_kv=torch.randn(2, 5, 6, generator=g), k_rope=torch.randn(2, 5, 2, generator=g),
                w_uk=torch.randn(8, 6, generator=g), w_uv=torch.randn(8, 6, generator=g))


@pytest.mark.parametrize("name", ["q_content", "q_rope", "c_kv", "k_rope", "w_uk", "w_uv"])
def test_latent_attention_integer_tensors_are_a_type_error_naming_them(name):
    args = _latent_args()
    args[name] = args[name].long()
    with pytest.raises(TypeError, match=re.escape(f"{name} {FLOATING}torch.int64")):
        latent_attention(**args, num_heads=2)


@pytest.mark.parametrize("name", ["c_kv", "w_uk", "w_uv", "k_rope"])
def test_latent_attention_mixed_dtypes_are_a_type_error_naming_them(name):
    args = _latent_args()
    args[name] = args[name].double()
    with pytest.raises(TypeError, match=re.escape("q_content, q_rope, c_kv, k_rope, w_uk, w_uv must share one dtype")
                       + ".*" + re.escape(f"{name} torch.float64")):
        latent_attention(**args, num_heads=2)
