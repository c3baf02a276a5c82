"""LinearAttention (Katharopoulos et al. 2020, arXiv:2006.16236) as a module: defaults, messages, padding
masks, the recurrent state, against a float64 loop written from eqs. 5–6 (φ = elu + 1) with the module's
weights copied."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.functional.linear import LinearState
from attnlab.nn import LinearAttention, create


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))


def reference(m, x, ok=None, causal=False):
    """y_i = W_o concat_h(Σ_j φ(q_i)ᵀφ(k_j) v_j / Σ_j φ(q_i)ᵀφ(k_j)) over allowed j; ok (b, n) real tokens."""
    P = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    x = x.detach().numpy()
    b, n, dim = x.shape
    ok = np.ones((b, n), dtype=bool) if ok is None else ok
    x = np.where(ok[..., None], x, 0.0)
    qkv = x @ P["qkv.weight"].T + P.get("qkv.bias", 0.0)
    h, d = m.num_heads, m.head_dim
    out = np.zeros((b, n, dim))
    for bi in range(b):
        for hi in range(h):
            q = qkv[bi, :, hi * d : (hi + 1) * d]
            k = qkv[bi, :, dim + hi * d : dim + (hi + 1) * d]
            v = qkv[bi, :, 2 * dim + hi * d : 2 * dim + (hi + 1) * d]
            for i in range(n):
                s = np.array([phi(q[i]) @ phi(k[j]) if ok[bi, j] and (not causal or j <= i) else 0.0 for j in range(n)])
                out[bi, i, hi * d : (hi + 1) * d] = s @ v / s.sum()
    y = out @ P["proj.weight"].T + P.get("proj.bias", 0.0)
    return np.where(ok[..., None], y, 0.0)


def x_of(b, n, dim, seed=0):
    return torch.randn(b, n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_defaults_and_parameters():
    m = LinearAttention(16)
    assert (m.dim, m.num_heads, m.head_dim) == (16, 8, 2)
    assert m.qkv.weight.shape == (48, 16) and m.qkv.bias is None
    assert m.proj.weight.shape == (16, 16) and m.proj.bias is not None
    assert m.extra_repr() == "dim=16, num_heads=8"
    other = LinearAttention(6, 3, qkv_bias=True, proj_bias=False)
    assert other.qkv.bias.shape == (18,) and other.proj.bias is None and other.head_dim == 2
    assert other.extra_repr() == "dim=6, num_heads=3"
    assert isinstance(create("linear", dim=4, num_heads=2), LinearAttention)


def test_argument_message():
    assert message(lambda: LinearAttention(8, 3)) == "dim must be a positive multiple of num_heads; got dim=8, num_heads=3"


@pytest.mark.parametrize("dim,heads,expected", [(0, 1, "dim must be an integer >= 1; got 0"),
                                                (-2, 1, "dim must be an integer >= 1; got -2"),
                                                (8, 0, "num_heads must be an integer >= 1; got 0")])
def test_sizes_below_one_name_the_argument(dim, heads, expected):
    assert message(lambda: LinearAttention(dim, heads)) == expected


def test_smallest_module_builds():
    assert LinearAttention(1, 1)(torch.randn(1, 2, 1))[0].shape == (1, 2, 1)


@pytest.mark.parametrize("shape", [(2, 8), (1, 2, 4), (1, 2, 3, 8)])
def test_input_message(shape):
    m = LinearAttention(8, 2)
    assert message(lambda: m(torch.randn(*shape))) == f"x must be (b, n, dim) with dim=8; got shape {shape}"


@pytest.mark.parametrize("form", [None, "2d", "4d"])
@pytest.mark.parametrize("causal", [False, True])
def test_module_against_the_loop(form, causal):
    torch.manual_seed(0)
    m = LinearAttention(8, 2, qkv_bias=True).double()
    x = x_of(2, 5, 8)
    pad = torch.tensor([[True, True, False, True, True], [True, True, True, True, False]])
    mask = None if form is None else (pad if form == "2d" else pad[:, None, None, :])
    if form is not None:
        x[~pad] = float("nan")
    y, w = m(x, mask=mask, causal=causal, need_weights=True)
    ref = reference(m, x, None if form is None else pad.numpy(), causal)
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    assert w.shape == (2, 2, 5, 5)
    if form is not None:
        assert torch.all(w[~pad[:, None, :, None].expand(2, 2, 5, 5)] == 0)  # padded queries: zero rows
        assert torch.all(w[pad[:, None, :, None].expand(2, 2, 5, 5) & ~pad[:, None, None, :]] == 0)
    assert m(x, mask=mask, causal=causal)[1] is None


def test_a_float_mask_is_passed_to_the_core_not_taken_as_padding():
    m = LinearAttention(4, 2).double()
    x = x_of(1, 3, 4)
    with pytest.raises(TypeError, match="bool"):
        m(x, mask=torch.zeros(1, 3, dtype=torch.float64))


def test_recurrent_state_equals_the_causal_loop():
    torch.manual_seed(1)
    m = LinearAttention(6, 3).double()
    x = x_of(2, 5, 6, seed=1)
    st = m.empty_state(2)
    assert isinstance(st, LinearState)
    assert st.s.shape == (2, 3, 2, 2) and st.z.shape == (2, 3, 2) and st.s.dtype == torch.float64
    assert torch.all(st.s == 0) and torch.all(st.z == 0)
    y1, st = m(x[:, :2], state=st)
    y2, st = m(x[:, 2:], state=st)
    np.testing.assert_allclose(torch.cat([y1, y2], 1).detach().numpy(), reference(m, x, causal=True), rtol=1e-10, atol=1e-12)
    assert isinstance(st, LinearState)


def test_empty_state_dtype_and_device():
    m = LinearAttention(4, 2)
    st = m.empty_state(3)
    assert st.s.dtype == torch.float32 and st.s.device.type == "cpu" and st.s.shape == (3, 2, 2, 2)
    st = m.empty_state(1, dtype=torch.float64, device="cpu")
    assert st.s.dtype == torch.float64 and st.z.dtype == torch.float64 and st.z.shape == (1, 2, 2)


def test_the_recurrent_form_takes_no_mask_and_no_weights():
    m = LinearAttention(4, 2)
    x = torch.randn(1, 2, 4)
    text = "the recurrent form (state=...) takes no mask and returns no weights"
    assert message(lambda: m(x, state=m.empty_state(1), mask=torch.ones(1, 2, dtype=torch.bool))) == text
    assert message(lambda: m(x, state=m.empty_state(1), need_weights=True)) == text


def test_the_default_call_is_not_causal():
    torch.manual_seed(2)
    m = LinearAttention(4, 2).double()
    x = x_of(1, 4, 4, seed=2)
    np.testing.assert_allclose(m(x)[0].detach().numpy(), reference(m, x), rtol=1e-10, atol=1e-12)
