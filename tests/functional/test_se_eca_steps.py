"""SE (Hu et al. 2018) and ECA (Wang et al. 2020) step by step: every recorded step's value against
float64 NumPy written from the papers' equations, and the formula each step shows in ``attnlab explain``
(plain and LaTeX) in the papers' notation; ECA's weight checks and adaptive kernel size.

    SE:  z = AvgPool(F),  s = σ(W_2 δ(W_1 z + b_1) + b_2),  F' = F ⊗ s
    ECA: z = AvgPool(F),  w = σ(C1D_k(z)) (zero padding k // 2, no bias),  F' = F ⊗ w
         k = ψ(C) = |(log₂ C + b) / γ|_odd
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.eca import eca, eca_kernel_size
from attnlab.functional.se import se


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def steps(t):
    return [(s.name, s.formula, s.latex) for s in t]


def test_se_steps_match_numpy_and_show_the_papers_formulas():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 3, 4))
    w1, b1, w2, b2 = rng.normal(size=(3, 6)), rng.normal(size=3), rng.normal(size=(6, 3)), rng.normal(size=6)
    z = x.mean(axis=(2, 3))  # (b, C)
    logits = np.stack([w2 @ np.maximum(w1 @ z[i] + b1, 0.0) + b2 for i in range(2)])
    s = sigmoid(logits)
    T = torch.tensor
    with attnlab.trace() as t:
        out, gate = se(T(x), T(w1), T(b1), T(w2), T(b2))
    assert steps(t) == [
        ("squeeze", "z = AvgPool(F)", r"z = F_{sq}(F) = \mathrm{AvgPool}(F)"),
        ("mlp", "W_2 δ(W_1 z)", r"W_2\,\delta(W_1 z)"),
        ("weights", "s = σ(W_2 δ(W_1 z))", r"s = \sigma(W_2\,\delta(W_1 z))"),
        ("output", "F' = F ⊗ s", r"F' = F \otimes s"),
    ]
    np.testing.assert_allclose(t["squeeze"].value.numpy(), z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t["mlp"].value.numpy(), logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t["weights"].value.numpy(), s[:, :, None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t["output"].value.numpy(), x * s[:, :, None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), x * s[:, :, None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gate.numpy(), s[:, :, None, None], rtol=1e-12, atol=1e-12)


def eca_reference(x, kernel):
    """σ of the zero-padded cross-correlation of the pooled channels with the kernel, no bias."""
    k = kernel.shape[0]
    z = x.mean(axis=(2, 3))
    zp = np.pad(z, ((0, 0), (k // 2, k // 2)))
    conv = np.stack([[zp[b, c:c + k] @ kernel for c in range(z.shape[1])] for b in range(z.shape[0])])
    return z, conv, sigmoid(conv)


def test_eca_steps_match_numpy_and_show_the_papers_formulas():
    rng = np.random.default_rng(1)
    x, kernel = rng.normal(size=(2, 7, 3, 2)), rng.normal(size=3)
    z, conv, w = eca_reference(x, kernel)
    with attnlab.trace() as t:
        out, gate = eca(torch.tensor(x), torch.tensor(kernel).reshape(1, 1, 3))
    assert steps(t) == [
        ("avg_pool", "z = AvgPool(F)", r"z = \mathrm{AvgPool}(F)"),
        ("conv", "conv1d_3(z)", r"\mathrm{C1D}_k(z)"),
        ("weights", "w = σ(conv1d_k(z))", r"\omega = \sigma(\mathrm{C1D}_k(z))"),
        ("output", "F' = F ⊗ w", r"F' = F \otimes \omega"),
    ]
    np.testing.assert_allclose(t["avg_pool"].value.numpy(), z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t["conv"].value.numpy(), conv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(t["weights"].value.numpy(), w[:, :, None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), x * w[:, :, None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gate.numpy(), w[:, :, None, None], rtol=1e-12, atol=1e-12)


def test_eca_conv_step_names_the_kernel_size():
    x = torch.randn(1, 9, 2, 2, dtype=torch.float64)
    with attnlab.trace() as t:
        eca(x, torch.randn(1, 1, 5, dtype=torch.float64))
    assert t["conv"].formula == "conv1d_5(z)"


@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 1, 4), (1, 2, 3), (2, 1, 3), (1, 1, 3, 1), (1, 3)])
def test_eca_refuses_a_weight_that_is_not_one_by_one_by_odd_k(shape):
    x = torch.randn(1, 4, 2, 2)
    got = "(" + ", ".join(map(str, shape)) + ")"
    with pytest.raises(ValueError, match=rf"^weight must be \(1, 1, k\) with k odd; got {re.escape(got)}$"):
        eca(x, torch.randn(*shape))


def nearest_odd(t):
    """|t|_odd: the odd integer nearest to t (an even integer t is halfway: the paper's code takes t + 1)."""
    lo = 2 * math.floor((t - 1) / 2) + 1  # the odd integer ≤ t
    return lo if t - lo < 1 else lo + 2


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 64, 100, 128, 256, 512, 1000, 2048])
@pytest.mark.parametrize("gamma, beta", [(2, 1), (1, 0), (3, 2)])
def test_eca_kernel_size_is_the_nearest_odd_of_log2_c_plus_b_over_gamma(channels, gamma, beta):
    assert eca_kernel_size(channels, gamma, beta) == nearest_odd(abs((math.log2(channels) + beta) / gamma))


@pytest.mark.parametrize("channels", [0, -3, 2.5, 8.0, "8", None])
def test_eca_kernel_size_refuses_what_is_not_a_positive_int(channels):
    with pytest.raises(ValueError, match=rf"^channels must be a positive int; got {re.escape(repr(channels))}$"):
        eca_kernel_size(channels)

