"""Positional encodings against the papers' formulas (NumPy), and RoPE's relative-position property."""

from __future__ import annotations

import math
import re

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
from attnlab.nn.positional import alibi_slopes, sinusoidal_table

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


# Positional encodings at their edges: every refusal with its exact
# message and the edge values each check lets through; the sinusoidal table (Vaswani et al. 2017 §3.5)
# at another base and added to non-zero inputs; the learned table's limits; RoPE (Su et al. 2021) on
# half precision, at large offsets and with YaRN's (Peng et al. 2023) custom betas, a clipped ramp and a
# degenerate one (transformers' +0.001), and dynamic NTK just past L; ALiBi slopes (Press et al. 2021)
# for head counts that are not powers of two. References: float64 NumPy written here from the papers.
def pe_np(pos, d, base=10000.0):
    out = np.zeros((len(pos), d))
    for r, p in enumerate(pos):
        for i in range(d // 2):
            out[r, 2 * i] = math.sin(p / base ** (2 * i / d))
            out[r, 2 * i + 1] = math.cos(p / base ** (2 * i / d))
    return out


def theta_np(d, base=10000.0):
    return np.array([base ** (-2 * i / d) for i in range(d // 2)])


def rope_np(x, pos, inv, factor=1.0):
    """x (..., n, d) NumPy: pair i of position p rotated by p·inv[i], times factor."""
    a = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = (x1 * np.cos(a) - x2 * np.sin(a)) * factor
    out[..., 1::2] = (x1 * np.sin(a) + x2 * np.cos(a)) * factor
    return out


def yarn_np(d, base, s, L, beta_fast=32.0, beta_slow=1.0):
    """Peng et al. 2023 as in transformers' _compute_yarn_parameters (find_correction_range, linear_ramp_factor)."""
    def dim(rot):
        return d * math.log(L / (rot * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(dim(beta_fast)), 0), min(math.ceil(dim(beta_slow)), d - 1)
    if lo == hi:
        hi += 0.001  # transformers: avoid a division by zero
    th = theta_np(d, base)
    out = np.empty(d // 2)
    for i in range(d // 2):
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        out[i] = th[i] / s * ramp + th[i] * (1 - ramp)
    return out


# ---- sinusoidal ------------------------------------------------------------------------------------

def test_sinusoidal_table_function_and_refusal():
    pos = torch.tensor([0, 3, 7])
    np.testing.assert_allclose(sinusoidal_table(pos, 6).double().numpy(), pe_np([0, 3, 7], 6), atol=1e-6)
    np.testing.assert_allclose(sinusoidal_table(pos, 4, base=100.0).double().numpy(), pe_np([0, 3, 7], 4, 100.0), atol=1e-6)
    assert sinusoidal_table(pos, 4).dtype == torch.float32
    with pytest.raises(ValueError, match=r"^sinusoidal encodings need an even dim; got 5$"):
        sinusoidal_table(pos, 5)
    big = torch.tensor([900, 1000])  # large positions: the default base 10000 exactly
    np.testing.assert_allclose(sinusoidal_table(big, 8).double().numpy(), pe_np([900, 1000], 8), atol=1e-4)
    batched = sinusoidal_table(torch.tensor([[0, 3], [7, 1]]), 4)  # positions of any shape (…, n) → (…, n, dim)
    assert batched.shape == (2, 2, 4)
    np.testing.assert_allclose(batched.double().numpy(), pe_np([0, 3, 7, 1], 4).reshape(2, 2, 4), atol=1e-6)


def test_sinusoidal_module_adds_the_table_at_its_base():
    x = torch.randn(2, 3, 4, dtype=torch.float64)
    got = SinusoidalPositionalEncoding(4, base=50.0)(x, offset=5)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), x.numpy() + pe_np([5, 6, 7], 4, 50.0)[None], atol=1e-6)
    assert SinusoidalPositionalEncoding(4)(x.half()).dtype == torch.float16  # the table is cast to the input's dtype
    got0 = SinusoidalPositionalEncoding(4)(x)  # offset 0, base 10000
    np.testing.assert_allclose(got0.numpy(), x.numpy() + pe_np([0, 1, 2], 4)[None], atol=1e-6)
    with pytest.raises(ValueError, match=r"^SinusoidalPositionalEncoding needs an even dim >= 2; got 3$"):
        SinusoidalPositionalEncoding(3)
    assert SinusoidalPositionalEncoding(2).dim == 2 and SinusoidalPositionalEncoding(2).base == 10000.0
    far = SinusoidalPositionalEncoding(8)(torch.zeros(1, 2, 8, dtype=torch.float64), offset=1000)
    np.testing.assert_allclose(far[0].numpy(), pe_np([1000, 1001], 8), atol=1e-4)


# ---- learned ------------------------------------------------------------------------------------

def test_learned_embedding_adds_its_rows_up_to_the_last_one():
    torch.manual_seed(0)
    emb = LearnedPositionalEmbedding(500, 8)
    assert emb.weight.shape == (500, 8) and emb.max_len == 500
    assert 0.015 < float(emb.weight.detach().std()) < 0.025  # N(0, 0.02²) (GPT-2)
    x = torch.randn(1, 3, 8)
    torch.testing.assert_close(emb(x, 497), x + emb.weight[497:500], atol=0, rtol=0)  # ends exactly at max_len
    torch.testing.assert_close(emb(x), x + emb.weight[:3], atol=0, rtol=0)
    assert emb(x.double(), 1).dtype == torch.float64
    half = emb(x.half(), 1)  # the table is cast to the input's dtype (no promotion to float32)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half, x.half() + emb.weight[1:4].detach().half(), atol=0, rtol=0)
    msg = ("positions 498..500 exceed the learned table of max_len=500; use a shorter input or a larger max_len "
           "(or rope/alibi/sinusoidal, which have no limit)")
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        emb(x, 498)


# ---- RoPE ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("head_dim", [0, 3, 7])
def test_rope_refuses_odd_or_empty_head_dims(head_dim):
    with pytest.raises(ValueError, match=f"^rotary embeddings need an even head_dim; got {head_dim}$"):
        RotaryEmbedding(head_dim)


def test_rope_smallest_head_dim_and_wrong_heads():
    rope = RotaryEmbedding(2)
    x = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    np.testing.assert_allclose(rope(x, 4).numpy(), rope_np(x.numpy(), [4, 5, 6], theta_np(2)), atol=1e-6)
    with pytest.raises(ValueError, match=re.escape("rotary embedding of head_dim=2 got heads of size 4 ((1, 1, 3, 4))")):
        rope(torch.randn(1, 1, 3, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_rope_at_large_offsets_in_each_dtype(dtype):
    """Rotations at positions 1000..1003 against float64 NumPy; half precision rotates in float32."""
    torch.manual_seed(1)
    rope = RotaryEmbedding(8, base=500.0)
    x = torch.randn(2, 3, 4, 8).to(dtype)
    got = rope(x, 1000)
    assert got.dtype == dtype and got.shape == x.shape
    want = rope_np(x.double().numpy(), np.arange(1000, 1004), theta_np(8, 500.0))
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-3, torch.float64: 1e-3}[dtype]
    np.testing.assert_allclose(got.double().numpy(), want, atol=tol * 4)


def test_rope_inv_freq_buffer_is_not_saved_and_repr():
    rope = RotaryEmbedding(8, base=100.0)
    np.testing.assert_allclose(rope.inv_freq.numpy(), theta_np(8, 100.0), rtol=1e-6)
    assert rope.theta is rope.inv_freq and rope.theta.dtype == torch.float32
    assert rope.state_dict() == {} and [n for n, _ in rope.named_buffers()] == ["theta"]
    assert rope.extra_repr() == "head_dim=8, base=100.0"
    lin = RotaryEmbedding(8, scaling={"type": "linear", "factor": 2})
    assert lin.extra_repr() == "head_dim=8, base=10000.0, scaling={'type': 'linear', 'factor': 2}"
    np.testing.assert_allclose(lin.inv_freq.numpy(), theta_np(8) / 2, rtol=1e-6)  # position interpolation


def test_rope_scaling_refusals_name_what_was_given():
    def refused(scaling, message):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            RotaryEmbedding(8, scaling=scaling)

    types = "('linear', 'ntk', 'dynamic', 'yarn', 'llama3', 'longrope')"
    refused(["linear", 2], f"scaling must be None or a dict with 'type' one of {types} and 'factor'; got ['linear', 2]")
    refused({"factor": 2}, f"scaling must be None or a dict with 'type' one of {types} and 'factor'; got {{'factor': 2}}")
    known = "['factor', 'original_max_position', 'type']"
    refused({"type": "linear", "factor": 2, "rope_type": "x", "alpha": 1, "beta_fast": 32},
            f"unknown RoPE scaling keys ['alpha', 'beta_fast', 'rope_type'] for type 'linear'; known: {known}")
    for factor in (True, "2", 0.99, None):
        refused({"type": "linear", "factor": factor},
                f"scaling['factor'] must be a finite number >= 1 (the context extension); got {factor!r}")
    for kind in ("dynamic", "yarn"):
        for L in (None, True, 4096.0, 0):
            refused({"type": kind, "factor": 2, "original_max_position": L},
                    f"scaling type {kind!r} needs 'original_max_position' (the trained context, an int >= 1); got {L!r}")


def test_rope_scaling_edges_that_are_allowed():
    sc = {"type": "linear", "factor": 1}
    one = RotaryEmbedding(8, scaling=sc)  # factor 1: no extension, θ unchanged
    np.testing.assert_allclose(one.inv_freq.numpy(), theta_np(8), rtol=1e-6)
    assert one.scaling == sc and one.scaling is not sc  # a copy: later edits to the dict do not reach it
    ntk = RotaryEmbedding(8, scaling={"type": "ntk", "factor": 3, "original_max_position": 1})
    np.testing.assert_allclose(ntk.inv_freq.numpy(), theta_np(8, 10000.0 * 3 ** (8 / 6)), rtol=1e-6)
    dyn = RotaryEmbedding(8, scaling={"type": "dynamic", "factor": 2.0, "original_max_position": 1})
    assert dyn.scaling["original_max_position"] == 1
    np.testing.assert_allclose(dyn.inv_freq.numpy(), theta_np(8), rtol=1e-6)  # dynamic: θ at lengths ≤ L


def test_dynamic_ntk_just_past_the_trained_length_and_in_forward():
    L, s, d = 10, 3.0, 8
    rope = RotaryEmbedding(d, scaling={"type": "dynamic", "factor": s, "original_max_position": L})
    np.testing.assert_allclose(rope.inv_freq_at(L).numpy(), theta_np(d), rtol=1e-6)
    s11 = s * 11 / L - (s - 1)
    np.testing.assert_allclose(rope.inv_freq_at(11).numpy(), theta_np(d, 10000.0 * s11 ** (d / (d - 2))), rtol=1e-5)
    assert rope.inv_freq_at(11).dtype == torch.float32
    x = torch.randn(1, 1, 4, d, dtype=torch.float64)
    s_n = s * 12 / L - (s - 1)  # offset 8 + 4 tokens: the length in use is 12
    want = rope_np(x.numpy(), np.arange(8, 12), theta_np(d, 10000.0 * s_n ** (d / (d - 2))))
    np.testing.assert_allclose(rope(x, 8).numpy(), want, atol=1e-5)


@pytest.mark.parametrize("d,L,s,betas", [
    (16, 256, 4.0, {}),  # lo = ⌊0.21⌋ = 0 without clipping
    (16, 10**9, 2.0, {}),  # hi = ⌈15.6⌉ clipped to d − 1 = 15
    (16, 4, 3.0, {}),  # dim_of(β_slow) = −0.39: lo = hi = 0 (clipped, rounded up): the ramp's +0.001
    (32, 8192, 8.0, {"beta_fast": 16.0, "beta_slow": 2.0}),
    (16, 10**7, 2.0, {"beta_fast": 1e4, "beta_slow": 0.01}),  # lo = 4, hi = ⌈16.3⌉ clipped to 15: the clip shapes the ramp
    (64, 2011, 2.0, {}),  # dim_of(β_fast = 32) = 8.0007: lo = 8 exactly at the default β_fast
])
def test_yarn_with_given_betas_and_clipped_or_degenerate_ramps(d, L, s, betas):
    rope = RotaryEmbedding(d, scaling={"type": "yarn", "factor": s, "original_max_position": L, **betas})
    want = yarn_np(d, 10000.0, s, L, **betas)
    np.testing.assert_allclose(rope.inv_freq.numpy(), want, rtol=1e-6)
    mscale = 0.1 * math.log(s) + 1.0
    assert rope.attention_factor == pytest.approx(mscale, rel=1e-12)
    x = torch.randn(1, 2, 3, d, dtype=torch.float64)
    np.testing.assert_allclose(rope(x, 5).numpy(), rope_np(x.numpy(), [5, 6, 7], want, mscale), atol=1e-5)
    cos, sin = rope.angles(3, 5)
    a = np.arange(5, 8)[:, None] * want[None]
    np.testing.assert_allclose(cos.double().numpy(), np.cos(a) * mscale, atol=1e-5)
    np.testing.assert_allclose(sin.double().numpy(), np.sin(a) * mscale, atol=1e-5)


def test_yarn_given_attention_factor():
    rope = RotaryEmbedding(8, scaling={"type": "yarn", "factor": 4.0, "original_max_position": 64, "attention_factor": 2.0})
    assert rope.attention_factor == 2.0
    cos, sin = rope.angles(2, 1)
    a = np.arange(1, 3)[:, None] * yarn_np(8, 10000.0, 4.0, 64)[None]
    np.testing.assert_allclose(sin.double().numpy(), 2 * np.sin(a), atol=1e-6)
    np.testing.assert_allclose(cos.double().numpy(), 2 * np.cos(a), atol=1e-6)
    plain = RotaryEmbedding(8, scaling={"type": "ntk", "factor": 4.0})
    assert plain.attention_factor == 1.0


# ---- ALiBi --------------------------------------------------------------------------------------

def slopes_np(h):
    """Press et al.'s get_slopes: geometric from 2^(−8/n) for n a power of two; otherwise the closest
    power's slopes, then every other slope of twice that power."""
    def pow2(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(h).is_integer():
        return pow2(h)
    c = 2 ** math.floor(math.log2(h))
    return pow2(c) + pow2(2 * c)[0::2][: h - c]


@pytest.mark.parametrize("h", [1, 2, 3, 5, 7, 12, 16])
def test_alibi_slopes_for_any_head_count(h):
    np.testing.assert_allclose(alibi_slopes(h).double().numpy(), slopes_np(h), rtol=1e-6)


def test_alibi_slopes_by_hand_and_refusal():
    assert alibi_slopes(1).tolist() == [2.0 ** -8]
    np.testing.assert_allclose(alibi_slopes(3).numpy(), [2.0 ** -4, 2.0 ** -8, 2.0 ** -2], rtol=1e-7)
    with pytest.raises(ValueError, match=r"^num_heads must be an integer >= 1; got 0$"):
        alibi_slopes(0)


def test_alibi_bias_more_keys_than_queries_and_repr():
    alibi = ALiBi(3)
    bias = alibi(2, 4)  # queries at positions 2 and 3
    m = slopes_np(3)
    want = np.array([[[-m[h] * abs(i + 2 - j) for j in range(4)] for i in range(2)] for h in range(3)])
    np.testing.assert_allclose(bias.double().numpy(), want, rtol=1e-6)
    assert alibi.extra_repr() == "num_heads=3" and alibi.state_dict() == {}
    assert [n for n, _ in alibi.named_buffers()] == ["slopes"]
    full = alibi(4, 4)
    assert torch.equal(full, full.transpose(-1, -2))  # symmetric without a causal mask


def rope_from_offset_np(x, offset=0, base=10000.0):
    """RoFormer rotation of x (..., n, d) in float64: pair i at position p turned by p·θ_i."""
    n, d = x.shape[-2], x.shape[-1]
    ang = np.arange(offset, offset + n)[:, None] * theta_np(d, base)[None, :]  # (n, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * np.cos(ang) - x2 * np.sin(ang)
    out[..., 1::2] = x1 * np.sin(ang) + x2 * np.cos(ang)
    return out


# ---- RoPE -------------------------------------------------------------------------------------------

def test_rope_angles_default_to_position_zero():
    rope = RotaryEmbedding(6)
    cos, sin = rope.angles(3)  # positions 0, 1, 2
    ang = np.arange(3)[:, None] * theta_np(6)[None, :]
    np.testing.assert_allclose(cos.numpy(), np.cos(ang), atol=1e-6, rtol=0)
    np.testing.assert_allclose(sin.numpy(), np.sin(ang), atol=1e-6, rtol=0)
    assert cos[0].eq(1).all() and sin[0].eq(0).all()


@pytest.mark.parametrize("shape", [(5, 4), (3, 5, 4), (2, 3, 5, 4)])
def test_rope_positions_come_from_the_second_to_last_axis_whatever_the_rank(shape):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64)
    out = RotaryEmbedding(4)(x, offset=2)
    np.testing.assert_allclose(out.numpy(), rope_from_offset_np(x.numpy(), offset=2), atol=1e-6, rtol=0)


def test_dynamic_ntk_at_exactly_the_trained_length_is_the_unscaled_theta():
    # Dynamic NTK rescales only for n > L; at n = L its s' = s·n/L − (s − 1) is 1 in exact arithmetic but
    # 1 + 4e-16 in floats for s = 3.7, L = 3. With a base at a float32 rounding midpoint, rescaling by that
    # s' would move the base by one float32 step, so θ at n = L must be the plain table itself.
    base = 10000 + 2.0**-11
    rope = RotaryEmbedding(8, base=base, scaling={"type": "dynamic", "factor": 3.7, "original_max_position": 3})
    plain = RotaryEmbedding(8, base=base).inv_freq
    assert torch.equal(rope.inv_freq_at(3), plain) and torch.equal(rope.inv_freq_at(2), plain)
    np.testing.assert_allclose(rope.inv_freq_at(3).numpy(), theta_np(8, base), rtol=1e-6)
    assert not torch.equal(rope.inv_freq_at(4), plain)  # past L it does rescale


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rope_half_precision_gradient_is_computed_in_float32_and_rounded_once(dtype):
    # out = (x1 c − x2 s, x1 s + x2 c) ⇒ ∂L/∂x1 = g1 c + g2 s, ∂L/∂x2 = −g1 s + g2 c, summed in float32
    # and rounded to the half type once (rounding each product first gives other values in about a
    # quarter of the entries).
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    x = torch.randn(1, 2, 16, 8).to(dtype).requires_grad_()
    g = torch.randn(1, 2, 16, 8).to(dtype)
    rope(x, offset=3).backward(g)
    ang = np.arange(3, 19)[:, None] * theta_np(8)[None, :]
    c, s = np.cos(ang), np.sin(ang)
    gn = g.double().numpy()
    want = np.empty(gn.shape)
    want[..., 0::2] = gn[..., 0::2] * c + gn[..., 1::2] * s
    want[..., 1::2] = -gn[..., 0::2] * s + gn[..., 1::2] * c
    assert x.grad.dtype == dtype
    assert torch.equal(x.grad, torch.from_numpy(want).to(dtype))
