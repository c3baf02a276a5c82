"""Positional encodings against the papers' formulas (NumPy), and RoPE's relative-position property."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.nn import (
    ALiBi,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from attnlab.nn.positional import alibi_slopes

pytestmark = pytest.mark.usefixtures("one_thread")


def test_sinusoidal_matches_the_paper_formula():
    d, n, offset = 8, 6, 3
    pe = SinusoidalPositionalEncoding(d)(torch.zeros(1, n, d), offset)[0].double().numpy()
    ref = np.zeros((n, d))
    for p in range(n):
        for i in range(d // 2):
            ref[p, 2 * i] = math.sin((p + offset) / 10000 ** (2 * i / d))
            ref[p, 2 * i + 1] = math.cos((p + offset) / 10000 ** (2 * i / d))
    np.testing.assert_allclose(pe, ref, atol=1e-5)
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding(7)


def test_learned_embedding_offsets_and_limit():
    emb = LearnedPositionalEmbedding(10, 4)
    x = torch.zeros(1, 3, 4)
    torch.testing.assert_close(emb(x, 2)[0], emb.weight[2:5])
    with pytest.raises(ValueError, match="max_len=10"):
        emb(torch.zeros(1, 4, 4), 8)


def test_rope_matches_complex_rotation():
    d, n = 6, 5
    rope = RotaryEmbedding(d)
    x = torch.randn(1, 1, n, d, dtype=torch.float64)
    got = rope(x, 2)[0, 0].numpy()
    z = x[0, 0].numpy()[:, 0::2] + 1j * x[0, 0].numpy()[:, 1::2]  # pairs as complex numbers
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    rot = z * np.exp(1j * np.outer(np.arange(2, 2 + n), theta))
    ref = np.stack([rot.real, rot.imag], axis=-1).reshape(n, d)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    # a rotation keeps the norm
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), np.linalg.norm(x[0, 0].numpy(), axis=-1), rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 200), n=st.integers(0, 200), shift=st.integers(0, 500), seed=st.integers(0, 2**16))
def test_rope_scores_depend_only_on_relative_position(m, n, shift, seed):
    g = torch.Generator().manual_seed(seed)
    rope = RotaryEmbedding(8)
    q = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 8, generator=g, dtype=torch.float64)

    def score(pq, pk):
        return float((rope(q, pq) * rope(k, pk)).sum())

    assert score(m, n) == pytest.approx(score(m + shift, n + shift), abs=1e-3)


def test_alibi_slopes_and_bias():
    np.testing.assert_allclose(alibi_slopes(8).numpy(), [2.0 ** -(i + 1) for i in range(8)], rtol=1e-6)
    # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence (the paper's code)
    np.testing.assert_allclose(alibi_slopes(6).numpy(), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3], rtol=1e-6)
    bias = ALiBi(2)(3, 5)  # queries at positions 2, 3, 4 of 5 keys
    slopes = alibi_slopes(2).numpy()
    for h in range(2):
        for i in range(3):
            for j in range(5):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * abs(i + 2 - j))


@pytest.mark.parametrize("kw", [{"rope": True}, {"alibi": True}])
def test_positions_change_self_attention_but_not_its_shape(kw):
    torch.manual_seed(0)
    plain = MultiHeadAttention(16, 4).eval()
    pos = MultiHeadAttention(16, 4, **kw).eval()
    pos.load_state_dict(plain.state_dict())
    x = torch.randn(1, 6, 16)
    a, b = plain(x)[0], pos(x)[0]
    assert a.shape == b.shape and not torch.allclose(a, b, atol=1e-4)
    # without positions self-attention is permutation-equivariant; with them it is not
    perm = torch.randperm(6)
    torch.testing.assert_close(plain(x[:, perm])[0], a[:, perm], atol=1e-5, rtol=0)
    assert not torch.allclose(pos(x[:, perm])[0], b[:, perm], atol=1e-4)


def test_rope_keeps_float64_inputs_in_float64():
    """Position 0 is a rotation by 0: the input comes back bit for bit (it used to be rounded to
    float32), and the gradient passes finite differences in float64."""
    rope = RotaryEmbedding(4)
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    out = rope(x)
    assert out.dtype == torch.float64 and torch.equal(out[..., 0, :], x[..., 0, :])
    assert torch.autograd.gradcheck(lambda t: rope(t, 5), (x,))
