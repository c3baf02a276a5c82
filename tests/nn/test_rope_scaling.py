"""RoPE scaling: inv_freq and YaRN's attention factor against the published formulas, written here in
float64 NumPy (position interpolation, NTK-aware, dynamic NTK, YaRN)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.nn import RotaryEmbedding

D, BASE = 16, 10000.0


def theta(d, base):
    return np.array([base ** (-2 * i / d) for i in range(d // 2)])


def yarn_ref(d, base, s, L, beta_fast=32, beta_slow=1):
    # Peng et al. 2023: r_i = L / λ_i (rotations over L), λ_i = 2π / θ_i; γ ramps from r < α (=β_slow) to r > β (=β_fast).
    # In dimension units as in the reference implementations: the dim whose θ rotates β times over L.
    def dim(rot):
        return d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(dim(beta_fast)), 0), min(math.ceil(dim(beta_slow)), d - 1)
    th = theta(d, base)
    out = np.empty(d // 2)
    for i in range(d // 2):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0 below lo (fast dims), 1 above hi (slow dims)
        out[i] = ramp * th[i] / s + (1 - ramp) * th[i]
    return out, 0.1 * math.log(s) + 1


def test_plain_is_the_roformer_theta():
    np.testing.assert_allclose(RotaryEmbedding(D).inv_freq.numpy(), theta(D, BASE), rtol=1e-6)
    assert RotaryEmbedding(D).attention_factor == 1.0


@pytest.mark.parametrize("s", [2.0, 8.0])
def test_linear_and_ntk(s):
    lin = RotaryEmbedding(D, scaling={"type": "linear", "factor": s})
    np.testing.assert_allclose(lin.inv_freq.numpy(), theta(D, BASE) / s, rtol=1e-6)
    ntk = RotaryEmbedding(D, scaling={"type": "ntk", "factor": s})
    np.testing.assert_allclose(ntk.inv_freq.numpy(), theta(D, BASE * s ** (D / (D - 2))), rtol=1e-6)
    # NTK keeps the highest frequency (i = 0) and divides the lowest by exactly s
    assert ntk.inv_freq[0] == 1.0
    np.testing.assert_allclose(float(ntk.inv_freq[-1]), theta(D, BASE)[-1] / s, rtol=1e-5)


def test_linear_scaling_is_position_interpolation():
    x = torch.randn(1, 2, 9, D)
    lin = RotaryEmbedding(D, scaling={"type": "linear", "factor": 4.0})
    cos, sin = lin.angles(9, 3)
    pos = np.arange(3, 12)[:, None] / 4.0  # position p acts as p / s
    np.testing.assert_allclose(cos.numpy(), np.cos(pos * theta(D, BASE)), atol=1e-5)
    np.testing.assert_allclose(sin.numpy(), np.sin(pos * theta(D, BASE)), atol=1e-5)
    assert lin(x, 3).shape == x.shape


def test_dynamic_ntk_by_length():
    L, s = 64, 4.0
    rope = RotaryEmbedding(D, scaling={"type": "dynamic", "factor": s, "original_max_position": L})
    np.testing.assert_allclose(rope.inv_freq_at(L).numpy(), theta(D, BASE), rtol=1e-6)
    for n in (100, 256, 1000):
        sn = s * n / L - (s - 1)
        np.testing.assert_allclose(rope.inv_freq_at(n).numpy(), theta(D, BASE * sn ** (D / (D - 2))), rtol=1e-5)
    cos, _ = rope.angles(200, 0)  # the whole call uses the length offset + n = 200
    sn = s * 200 / L - (s - 1)
    np.testing.assert_allclose(cos.numpy(), np.cos(np.arange(200)[:, None] * theta(D, BASE * sn ** (D / (D - 2)))), atol=2e-4)


@pytest.mark.parametrize("d,L,s", [(16, 128, 4.0), (64, 2048, 16.0), (32, 4096, 2.0)])
def test_yarn_inv_freq_and_attention_factor(d, L, s):
    rope = RotaryEmbedding(d, scaling={"type": "yarn", "factor": s, "original_max_position": L})
    want, mscale = yarn_ref(d, BASE, s, L)
    np.testing.assert_allclose(rope.inv_freq.numpy(), want, rtol=1e-5)
    assert rope.attention_factor == pytest.approx(mscale)
    cos, sin = rope.angles(5, 0)
    np.testing.assert_allclose(cos[0].numpy(), np.full(d // 2, mscale), rtol=1e-6)  # cos(0) · √(1/t)


def test_yarn_attention_factor_scales_scores_by_its_square():
    d = 16
    rope = RotaryEmbedding(d, scaling={"type": "yarn", "factor": 4.0, "original_max_position": 32})
    plain = RotaryEmbedding(d, scaling={"type": "yarn", "factor": 4.0, "original_max_position": 32, "attention_factor": 1.0})
    q, k = torch.randn(1, 1, 6, d, dtype=torch.float64), torch.randn(1, 1, 6, d, dtype=torch.float64)
    s1 = rope(q) @ rope(k).transpose(-1, -2)
    s0 = plain(q) @ plain(k).transpose(-1, -2)
    torch.testing.assert_close(s1, s0 * rope.attention_factor**2, rtol=1e-5, atol=1e-5)


def test_bad_scaling():
    with pytest.raises(ValueError, match="type"):
        RotaryEmbedding(D, scaling={"type": "su", "factor": 2})
    with pytest.raises(ValueError, match="factor"):
        RotaryEmbedding(D, scaling={"type": "linear", "factor": 0.5})
    with pytest.raises(ValueError, match="original_max_position"):
        RotaryEmbedding(D, scaling={"type": "yarn", "factor": 2.0})
