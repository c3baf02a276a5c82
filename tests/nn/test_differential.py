"""DifferentialAttention (Ye et al. 2024, arXiv:2410.05258): defaults, initialisation, the λ
reparameterisation, argument messages, masks, biases and dropout, against a float64 NumPy reference
written from the paper's eqs. 1–3 (λ_init = 0.8 − 0.6·exp(−0.3·(l − 1))) with the module's weights."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.nn import DifferentialAttention, create


def softmax(e, ok):
    e = np.where(ok, e, -np.inf)
    p = np.exp(e - e.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True)


def reference(m, x, ok, depth):
    """x (b, n, dim), ok (b|1, n|1, n) bool → y (b, n, dim), weights (b, h, n, n) = A_1 − λ A_2."""
    P = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    x = x.detach().numpy()
    h, d = m.num_heads, m.head_dim
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * depth)
    lam = math.exp(P["lambda_q1"] @ P["lambda_k1"]) - math.exp(P["lambda_q2"] @ P["lambda_k2"]) + lam_init

    def proj(name):
        return x @ P[f"{name}.weight"].T + P.get(f"{name}.bias", 0.0)

    Q, K, V = proj("q_proj"), proj("k_proj"), proj("v_proj")
    heads, weights = [], []
    for i in range(h):
        q1, q2 = Q[..., 2 * i * d : (2 * i + 1) * d], Q[..., (2 * i + 1) * d : (2 * i + 2) * d]
        k1, k2 = K[..., 2 * i * d : (2 * i + 1) * d], K[..., (2 * i + 1) * d : (2 * i + 2) * d]
        a = softmax(q1 @ k1.transpose(0, 2, 1) / math.sqrt(d), ok) - lam * softmax(q2 @ k2.transpose(0, 2, 1) / math.sqrt(d), ok)
        o = a @ V[..., i * 2 * d : (i + 1) * 2 * d]
        o = o / np.sqrt((o**2).mean(-1, keepdims=True) + 1e-5) * P["sub_norm.weight"]
        heads.append((1 - lam_init) * o)
        weights.append(a)
    return np.concatenate(heads, -1) @ P["out_proj.weight"].T + P["out_proj.bias"], np.stack(weights, 1), lam


def x_of(b, n, dim, seed=0):
    return torch.randn(b, n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_defaults_and_parameter_shapes():
    m = DifferentialAttention(16)
    assert (m.dim, m.num_heads, m.head_dim) == (16, 4, 2)  # d_h = dim / (2h)
    assert m.lambda_init == pytest.approx(0.2) and m.attn_drop == 0.0
    for name in ("q_proj", "k_proj", "v_proj"):
        assert getattr(m, name).weight.shape == (16, 16) and getattr(m, name).bias is None
    assert m.out_proj.weight.shape == (16, 16) and m.out_proj.bias is not None
    assert m.sub_norm.normalized_shape == (4,) and m.sub_norm.eps == 1e-5
    assert m.extra_repr() == "dim=16, num_heads=4, lambda_init=0.2000"
    biased = DifferentialAttention(8, 2, depth=3, qkv_bias=True, attn_drop=0.25)
    assert all(getattr(biased, n).bias.shape == (8,) for n in ("q_proj", "k_proj", "v_proj"))
    assert biased.attn_drop == 0.25
    assert biased.lambda_init == pytest.approx(0.8 - 0.6 * math.exp(-0.9))
    assert biased.extra_repr() == f"dim=8, num_heads=2, lambda_init={0.8 - 0.6 * math.exp(-0.9):.4f}"
    assert isinstance(create("differential", dim=8, num_heads=2), DifferentialAttention)


def test_lambda_parameters_are_drawn_from_n_0_0_1():
    torch.manual_seed(0)
    m = DifferentialAttention(2048, 1)  # d_h = 1024
    values = torch.cat([getattr(m, n).detach() for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")])
    assert values.shape == (4096,)
    assert 0.09 < values.std().item() < 0.11 and abs(values.mean().item()) < 0.01
    assert len({getattr(m, n).data_ptr() for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")}) == 4


def test_lam_is_the_reparameterisation():
    m = DifferentialAttention(8, 2, depth=1)
    with torch.no_grad():
        m.lambda_q1.copy_(torch.tensor([0.3, -0.2]))
        m.lambda_k1.copy_(torch.tensor([0.5, 0.4]))
        m.lambda_q2.copy_(torch.tensor([-0.1, 0.6]))
        m.lambda_k2.copy_(torch.tensor([0.2, 0.7]))
    expected = math.exp(0.15 - 0.08) - math.exp(-0.02 + 0.42) + 0.8 - 0.6 * math.exp(-0.3)
    assert m.lam().item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("dim,heads", [(12, 4), (6, 2)])
def test_argument_message(dim, heads):
    assert message(lambda: DifferentialAttention(dim, heads)) == (
        f"dim must be a positive multiple of 2·num_heads; got dim={dim}, num_heads={heads}")


@pytest.mark.parametrize("dim,heads,expected", [(0, 1, "dim must be an integer >= 1; got 0"),
                                                (-4, 1, "dim must be an integer >= 1; got -4"),
                                                (8, 0, "num_heads must be an integer >= 1; got 0")])
def test_sizes_below_one_name_the_argument(dim, heads, expected):
    assert message(lambda: DifferentialAttention(dim, heads)) == expected


def test_smallest_module_builds():
    m = DifferentialAttention(2, 1)
    assert m.head_dim == 1 and m(torch.randn(1, 3, 2))[0].shape == (1, 3, 2)


@pytest.mark.parametrize("shape", [(3, 8), (1, 3, 6), (1, 2, 3, 8)])
def test_input_message(shape):
    m = DifferentialAttention(8, 2)
    assert message(lambda: m(torch.randn(*shape))) == f"x must be (b, n, dim) with dim=8; got shape {shape}"


@pytest.mark.parametrize("form", ["2d", "4d"])
@pytest.mark.parametrize("causal", [False, True])
def test_padding_masks_with_biases_against_the_reference(form, causal):
    torch.manual_seed(1)
    m = DifferentialAttention(8, 2, depth=4, qkv_bias=True).double()
    with torch.no_grad():
        for p in (m.q_proj.bias, m.k_proj.bias, m.v_proj.bias, m.sub_norm.weight):
            p.copy_(torch.randn(p.shape, dtype=torch.float64))
    x = x_of(2, 5, 8, seed=1)
    pad = torch.tensor([[True, True, True, True, False], [True, False, True, True, True]])
    x[0, 4] = float("nan")
    ok = pad[:, None, :].numpy()
    if causal:
        ok = ok & np.tril(np.ones((5, 5), dtype=bool))
    y_ref, w_ref, _ = reference(m, torch.where(pad[..., None], x, 0.0), ok, depth=4)
    y_ref = np.where(pad.numpy()[..., None], y_ref, 0.0)
    w_ref = np.where(pad.numpy()[:, None, :, None], w_ref, 0.0)
    y, w = m(x, mask=pad if form == "2d" else pad[:, None, None, :], causal=causal, need_weights=True)
    np.testing.assert_allclose(y.detach().numpy(), y_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(w.detach().numpy(), w_ref, rtol=1e-9, atol=1e-10)


def test_a_float_bias_mask_hides_keys_and_keeps_every_query():
    torch.manual_seed(2)
    m = DifferentialAttention(8, 2).double()
    x = x_of(1, 4, 8, seed=2)
    bias = torch.tensor([[0.0, 0.0, float("-inf"), 0.0]], dtype=torch.float64)
    y, w = m(x, mask=bias, need_weights=True)
    ok = np.array([[[True, True, False, True]]])
    y_ref, w_ref, _ = reference(m, x, ok, depth=0)
    np.testing.assert_allclose(y.detach().numpy(), y_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(w.detach().numpy(), w_ref, rtol=1e-9, atol=1e-10)
    assert m(x)[1] is None


def test_dropout_acts_only_in_training():
    torch.manual_seed(3)
    m = DifferentialAttention(8, 2, attn_drop=0.5).double()
    x = x_of(1, 6, 8, seed=3)
    m.eval()
    y_ref, _, _ = reference(m, x, np.ones((1, 6, 6), dtype=bool), depth=0)
    np.testing.assert_allclose(m(x)[0].detach().numpy(), y_ref, rtol=1e-9, atol=1e-10)
    m.train()
    draws = torch.stack([m(x)[0] for _ in range(50)])
    assert (draws - torch.from_numpy(y_ref)).abs().amax(dim=(1, 2, 3)).min() > 1e-3
