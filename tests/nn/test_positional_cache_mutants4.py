"""Behaviour the earlier nn tests left open (found by mutation testing), each against an independent
reference: RoPE (Su et al. 2021) on heads without a batch axis, through the public ``angles`` with its
default offset, at exactly the trained length under dynamic NTK, and its half-precision gradient
(computed in float32 and rounded once) against float64 NumPy; the encoder layer's post-norm cached
decoding and the decoder layer's bias=False / layer_norm_eps against torch.nn's layers with copied
weights; the traced Luong scale step's LaTeX; a fresh MemoryCache; WindowCache's integer positions and
its shape refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import attnlab
from attnlab.nn import (
    KVCache,
    LuongAttention,
    MemoryCache,
    RotaryEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    WindowCache,
)
from attnlab.nn.convert import from_torch

pytestmark = pytest.mark.usefixtures("one_thread")


def theta_np(d, base=10000.0):
    return np.array([base ** (-2 * i / d) for i in range(d // 2)])


def rope_np(x, offset=0, base=10000.0):
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
    np.testing.assert_allclose(out.numpy(), rope_np(x.numpy(), offset=2), atol=1e-6, rtol=0)


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


# ---- layers against torch.nn ---------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_cached_causal_steps_match_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True,
                                        norm_first=norm_first).eval()
    ours = TransformerEncoderLayer(8, 2, ffn_dim=12, dropout=0.0, norm_first=norm_first).eval()
    ours.self_attn = from_torch(theirs.self_attn)
    missing, unexpected = ours.load_state_dict(
        {k: v for k, v in theirs.state_dict().items() if not k.startswith("self_attn.")}, strict=False)
    assert not unexpected and all(k.startswith("self_attn.") for k in missing)
    x = torch.randn(1, 4, 8)
    want = theirs(x, src_mask=nn.Transformer.generate_square_subsequent_mask(4), is_causal=True)
    cache = KVCache(1)
    steps = [ours(x[:, t:t + 1], causal=True, cache=cache[0]) for t in range(4)]
    assert cache[0].length == 4
    torch.testing.assert_close(torch.cat(steps, 1), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_without_biases_and_with_an_epsilon_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True, bias=False,
                                        layer_norm_eps=0.5, norm_first=norm_first).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = TransformerDecoderLayer(8, 2, ffn_dim=12, dropout=0.0, bias=False, layer_norm_eps=0.5,
                                   norm_first=norm_first).eval()
    ours.self_attn, ours.multihead_attn = from_torch(theirs.self_attn), from_torch(theirs.multihead_attn)
    missing, unexpected = ours.load_state_dict(
        {k: v for k, v in theirs.state_dict().items() if not k.startswith(("self_attn.", "multihead_attn."))},
        strict=False)
    # torch's bias=False drops the LayerNorm biases too; ours keep theirs (zero from construction)
    assert not unexpected
    assert sorted(k for k in missing if not k.startswith(("self_attn.", "multihead_attn."))) == [
        "norm1.bias", "norm2.bias", "norm3.bias"]
    assert all(getattr(ours, f"norm{i}").bias.eq(0).all() for i in (1, 2, 3))
    assert ours.linear1.bias is None and ours.linear2.bias is None
    assert ours.norm1.eps == ours.norm2.eps == ours.norm3.eps == 0.5
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    want = theirs(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(3), tgt_is_causal=True)
    torch.testing.assert_close(ours(x, memory), want, atol=1e-5, rtol=0)


# ---- Luong's traced scale step ------------------------------------------------------------------------

def test_traced_luong_scale_step_carries_its_latex():
    m = LuongAttention(4, 4, score="dot", scale=True)
    with attnlab.trace() as t:
        m(torch.randn(1, 2, 4), torch.randn(1, 3, 4))
    assert t["scaled_scores"].latex == r"e_{ij} / \sqrt{d_k}"


# ---- caches ---------------------------------------------------------------------------------------------

def test_fresh_memory_cache_holds_nothing():
    c = MemoryCache()
    assert c.keys is None and c.values is None
    k = torch.zeros(1, 2, 4)
    assert c.lookup(k, k) is None
    c.store(k, k, torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))
    c.reset()
    assert c.keys is None and c.values is None and repr(c) == "MemoryCache(keys=None)"


def test_window_cache_positions_are_integers():
    c = WindowCache(3, sinks=1)
    assert c.positions.dtype == torch.long and c.positions.shape == (0,)
    k = torch.zeros(1, 1, 5, 2)
    c.update(k, k)
    assert c.positions.dtype == torch.long and c.positions.tolist() == [0, 3, 4]
    c.reset()
    assert c.positions.dtype == torch.long and c.positions.shape == (0,)


@pytest.mark.parametrize("k_shape, v_shape", [((1, 1, 2, 4), (1, 1, 2)), ((1, 1, 2), (1, 1, 2, 4)),
                                               ((1, 1, 2, 4, 1), (1, 1, 2, 4))])
def test_window_cache_refuses_heads_of_the_wrong_rank_even_when_the_first_axes_agree(k_shape, v_shape):
    c = WindowCache(4)
    got = f"({', '.join(map(str, k_shape))}), ({', '.join(map(str, v_shape))})"
    with pytest.raises(ValueError, match="^" + re.escape(
            f"cache.update expects k, v of shape (b, h_kv, n, d_h); got {got}") + "$"):
        c.update(torch.zeros(k_shape), torch.zeros(v_shape))
    assert c.length == 0 and c.keys is None

