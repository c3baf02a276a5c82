"""CBAM (Woo et al. 2018) step by step: each recorded step of channel and spatial attention against
float64 NumPy written from the paper's equations, the formula each step shows in ``attnlab explain``
(plain and LaTeX), the weight checks' messages and the bottleneck width.

    channel: M_c = σ(MLP(AvgPool(F)) + MLP(MaxPool(F))),  MLP(x) = W_1 δ(W_0 x + b_0) + b_1,  F' = F ⊗ M_c
    spatial: M_s = σ(f^{k×k}([AvgPool_c(F); MaxPool_c(F)]))  (zero 'same' padding),  F' = F ⊗ M_s
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.channel import channel_attention, reduced_channels, spatial_attention


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def steps(t):
    return [(s.name, s.formula, s.latex) for s in t]


def test_channel_attention_steps_match_numpy_and_show_the_papers_formulas():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 3, 4))
    w0, b0, w1, b1 = rng.normal(size=(2, 6)), rng.normal(size=2), rng.normal(size=(6, 2)), rng.normal(size=6)
    avg, mx = x.mean(axis=(2, 3)), x.max(axis=(2, 3))
    mlp = lambda z: np.maximum(z @ w0.T + b0, 0.0) @ w1.T + b1  # noqa: E731
    logits = mlp(avg) + mlp(mx)
    m_c = sigmoid(logits)[:, :, None, None]
    T = torch.tensor
    with attnlab.trace() as t:
        out, gate = channel_attention(T(x), T(w0), T(b0), T(w1), T(b1))
    assert steps(t) == [
        ("avg_pool", "F_avg = AvgPool(F)", r"F^c_{avg} = \mathrm{AvgPool}(F)"),
        ("max_pool", "F_max = MaxPool(F)", r"F^c_{max} = \mathrm{MaxPool}(F)"),
        ("mlp", "MLP(F_avg) + MLP(F_max)", r"\mathrm{MLP}(F_{avg}) + \mathrm{MLP}(F_{max})"),
        ("weights", "M_c = σ(MLP(F_avg) + MLP(F_max))", r"M_c = \sigma(\cdot)"),
        ("output", "F' = F ⊗ M_c", r"F' = F \otimes M_c"),
    ]
    for name, want in [("avg_pool", avg), ("max_pool", mx), ("mlp", logits), ("weights", m_c), ("output", x * m_c)]:
        np.testing.assert_allclose(t[name].value.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(out.numpy(), x * m_c, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gate.numpy(), m_c, rtol=1e-12, atol=1e-12)


def spatial_reference(x, kernel, bias):
    """Cross-correlation of [mean_c; max_c] with the (2, k, k) kernel, zero padding k // 2."""
    k = kernel.shape[-1]
    pooled = np.stack([x.mean(1), x.max(1)], 1)  # (b, 2, H, W)
    p = np.pad(pooled, ((0, 0), (0, 0), (k // 2, k // 2), (k // 2, k // 2)))
    h, w = x.shape[2:]
    conv = np.full((x.shape[0], 1, h, w), bias)
    for i in range(h):
        for j in range(w):
            conv[:, 0, i, j] += np.einsum("bcij,cij->b", p[:, :, i:i + k, j:j + k], kernel)
    return pooled, conv, sigmoid(conv)


@pytest.mark.parametrize("k", [3, 5])
def test_spatial_attention_steps_match_numpy_and_show_the_papers_formulas(k):
    rng = np.random.default_rng(k)
    x, kernel, bias = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, k, k)), rng.normal()
    pooled, conv, m_s = spatial_reference(x, kernel, bias)
    T = torch.tensor
    with attnlab.trace() as t:
        out, gate = spatial_attention(T(x), T(kernel)[None], T([bias], dtype=torch.float64))
    assert steps(t) == [
        ("pooled", "[mean_c F; max_c F]", r"[F^s_{avg}; F^s_{max}]"),
        ("conv", f"f^{{{k}×{k}}}([F_avg; F_max])", r"f([F_{avg}; F_{max}])"),
        ("weights", "M_s = σ(f([F_avg; F_max]))", r"M_s = \sigma(\cdot)"),
        ("output", "F' = F ⊗ M_s", r"F' = F \otimes M_s"),
    ]
    for name, want in [("pooled", pooled), ("conv", conv), ("weights", m_s), ("output", x * m_s)]:
        np.testing.assert_allclose(t[name].value.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(out.numpy(), x * m_s, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gate.numpy(), m_s, rtol=1e-12, atol=1e-12)


def test_spatial_conv_step_names_the_kernel_size():
    with attnlab.trace() as t:
        spatial_attention(torch.randn(1, 2, 8, 8), torch.randn(1, 2, 7, 7))
    assert t["conv"].formula == "f^{7×7}([F_avg; F_max])"


@pytest.mark.parametrize("shape", [(1, 2, 3, 5), (1, 2, 5, 3), (1, 2, 2, 2), (1, 2, 4, 4), (1, 3, 3, 3),
                                   (2, 2, 3, 3), (1, 2, 3), (1, 2, 3, 3, 1)])
def test_spatial_attention_refuses_a_weight_that_is_not_one_by_two_by_odd_k_by_k(shape):
    got = "(" + ", ".join(map(str, shape)) + ")"
    with pytest.raises(ValueError, match=rf"^weight must be \(1, 2, k, k\) with k odd; got {re.escape(got)}$"):
        spatial_attention(torch.randn(1, 2, 5, 5), torch.randn(*shape))


@pytest.mark.parametrize("shape", [(2, 6, 1), (6,), (2, 5)])
def test_channel_attention_refuses_a_w1_that_is_not_c_r_by_c(shape):
    x = torch.randn(1, 6, 2, 2)
    got = "(" + ", ".join(map(str, shape)) + ")"
    with pytest.raises(ValueError, match=rf"^w1 must be \(C/r, C\) = \(·, 6\); got {re.escape(got)}$"):
        channel_attention(x, torch.randn(*shape), None, torch.randn(6, 2), None)


def test_channel_attention_refuses_a_w2_that_is_not_c_by_c_r():
    x = torch.randn(1, 6, 2, 2)
    msg = "w2 must have shape (6, 2) (the MLP's second layer, (C, C/r)); got (2, 6)"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        channel_attention(x, torch.randn(2, 6), None, torch.randn(2, 6), None)


@pytest.mark.parametrize("channels, reduction, width", [(8, 1, 8), (8, 2, 4), (7, 2, 3), (3, 16, 1), (1, 1, 1)])
def test_reduced_channels_is_c_over_r_at_least_one(channels, reduction, width):
    assert reduced_channels(channels, reduction) == width


@pytest.mark.parametrize("reduction", [0, -2, 2.0])
def test_reduced_channels_refuses_a_reduction_that_is_not_a_positive_int(reduction):
    with pytest.raises(ValueError, match=rf"^reduction must be a positive int \(the ratio r of C to C/r\); got {re.escape(repr(reduction))}$"):
        reduced_channels(8, reduction)
