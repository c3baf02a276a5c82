"""RoPE scaling of Llama 3 (``llama3``) and LongRoPE (``longrope``): inverse frequencies and attention factor
against the published formulas (Meta's ``apply_scaling``, LongRoPE's θ_i / λ_i and √(1 + ln s / ln L)) written
here in float64, against values worked out by hand, and against transformers' ``ROPE_INIT_FUNCTIONS`` and
rotary module with a config built here; argument checks name what was given."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab.nn import RotaryEmbedding

transformers = pytest.importorskip("transformers")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

D, BASE, L, S = 16, 10000.0, 128, 8.0
SHORT = [1.0 + 0.1 * i for i in range(D // 2)]
LONG = [1.0 + 0.5 * i for i in range(D // 2)]
LLAMA3 = {"type": "llama3", "factor": S, "original_max_position": L, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LONGROPE = {"type": "longrope", "factor": S, "original_max_position": L, "short_factor": SHORT, "long_factor": LONG}


def theta(d=D, base=BASE):
    return np.array([base ** (-2 * i / d) for i in range(d // 2)])


def meta_apply_scaling(freqs, scale_factor, low_freq_factor, high_freq_factor, old_context_len):
    """Llama 3.1's reference code (meta-llama/llama-models, ``apply_scaling``), one frequency at a time."""
    low_freq_wavelen, high_freq_wavelen = old_context_len / low_freq_factor, old_context_len / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(freq)
        elif wavelen > low_freq_wavelen:
            out.append(freq / scale_factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - smooth) * freq / scale_factor + smooth * freq)
    return np.array(out)


def hf_config(rope_parameters):
    return transformers.LlamaConfig(hidden_size=4 * D, num_attention_heads=4, head_dim=D, max_position_embeddings=int(S * L),
                                    rope_parameters={"rope_theta": BASE, **rope_parameters})


# --- Llama 3 --------------------------------------------------------------------------------------------------


def test_llama3_by_hand():
    # θ_i = 10⁴^(−i/8); λ_i = 2π/θ_i = 6.3, 19.9, 62.8, 198.7, …; the kept band is λ < L/4 = 32, the divided one
    # λ > L/1 = 128; i = 2 is between: γ = (128/62.83 − 1)/3 = 0.34573, θ' = 0.65427 · 0.1/8 + 0.34573 · 0.1.
    want = [1.0, 0.31622777, 0.04275112, 0.0316227766 / 8, 0.01 / 8, 0.00316227766 / 8, 0.001 / 8, 0.000316227766 / 8]
    rope = RotaryEmbedding(D, scaling=LLAMA3)
    np.testing.assert_allclose(rope.inv_freq.numpy(), want, rtol=2e-6)
    assert rope.attention_factor == 1.0


@pytest.mark.parametrize("d,L_,s,low,high", [(16, 128, 8.0, 1.0, 4.0), (64, 8192, 8.0, 1.0, 4.0),
                                             (128, 8192, 32.0, 1.0, 4.0), (32, 512, 4.0, 2.0, 8.0)])
def test_llama3_equals_metas_reference(d, L_, s, low, high):
    sc = {"type": "llama3", "factor": s, "original_max_position": L_, "low_freq_factor": low, "high_freq_factor": high}
    rope = RotaryEmbedding(d, base=500000.0, scaling=sc)
    np.testing.assert_allclose(rope.inv_freq.numpy(), meta_apply_scaling(theta(d, 500000.0), s, low, high, L_),
                               rtol=1e-5)
    # the same by length: llama3 does not change with the sequence length
    assert torch.equal(rope.inv_freq_at(100 * L_), rope.inv_freq)


def test_llama3_defaults_are_the_published_low_1_and_high_4():
    default = RotaryEmbedding(D, scaling={"type": "llama3", "factor": S, "original_max_position": L})
    assert torch.equal(default.inv_freq, RotaryEmbedding(D, scaling=LLAMA3).inv_freq)


@pytest.mark.parametrize("d,L_,s,low,high", [(16, 128, 8.0, 1.0, 4.0), (64, 2048, 16.0, 2.0, 8.0)])
def test_llama3_equals_transformers(d, L_, s, low, high):
    cfg = transformers.LlamaConfig(hidden_size=4 * d, num_attention_heads=4, head_dim=d, rope_parameters={
        "rope_type": "llama3", "rope_theta": BASE, "factor": s, "low_freq_factor": low, "high_freq_factor": high,
        "original_max_position_embeddings": L_})
    want, factor = rope_utils.ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    sc = {"type": "llama3", "factor": s, "original_max_position": L_, "low_freq_factor": low, "high_freq_factor": high}
    rope = RotaryEmbedding(d, scaling=sc)
    torch.testing.assert_close(rope.inv_freq, want, rtol=1e-6, atol=0)
    assert rope.attention_factor == factor == 1.0


# --- LongRoPE -------------------------------------------------------------------------------------------------


def test_longrope_by_hand():
    rope = RotaryEmbedding(D, scaling=LONGROPE)
    np.testing.assert_allclose(rope.inv_freq.numpy(), theta() / np.array(SHORT), rtol=1e-6)
    assert float(rope.inv_freq[1]) == pytest.approx(0.31622777 / 1.1, rel=1e-6)  # 0.28748
    np.testing.assert_allclose(rope.inv_freq_at(L).numpy(), theta() / np.array(SHORT), rtol=1e-6)  # up to L: short
    np.testing.assert_allclose(rope.inv_freq_at(L + 1).numpy(), theta() / np.array(LONG), rtol=1e-6)  # beyond: long
    assert rope.attention_factor == pytest.approx(math.sqrt(10 / 7))  # √(1 + ln 8 / ln 128) = √(1 + 3/7)
    given = RotaryEmbedding(D, scaling={**LONGROPE, "attention_factor": 1.5})
    assert given.attention_factor == 1.5
    assert RotaryEmbedding(D, scaling={**LONGROPE, "factor": 1.0}).attention_factor == 1.0  # no extension


def test_longrope_angles_switch_to_the_long_factors_beyond_the_trained_context():
    rope = RotaryEmbedding(D, scaling=LONGROPE)
    a = math.sqrt(10 / 7)
    for n, offset, factors in ((L, 0, SHORT), (1, L - 1, SHORT), (L + 1, 0, LONG), (1, L, LONG)):
        cos, sin = rope.angles(n, offset)
        p = np.arange(offset, offset + n)[:, None] * (theta() / np.array(factors))
        np.testing.assert_allclose(cos.numpy(), a * np.cos(p), atol=2e-5)
        np.testing.assert_allclose(sin.numpy(), a * np.sin(p), atol=2e-5)


@pytest.mark.parametrize("seq_len", [None, L, L + 1, 4 * L])
def test_longrope_equals_transformers(seq_len):
    cfg = hf_config({"rope_type": "longrope", "factor": S, "short_factor": SHORT, "long_factor": LONG,
                     "original_max_position_embeddings": L})
    want, factor = rope_utils.ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu", seq_len=seq_len)
    rope = RotaryEmbedding(D, scaling=LONGROPE)
    torch.testing.assert_close(rope.inv_freq_at(seq_len or 1), want, rtol=1e-6, atol=0)
    assert rope.attention_factor == pytest.approx(factor, rel=1e-12)


@pytest.mark.parametrize("n", [L, 3 * L])
def test_longrope_cos_sin_equal_transformers_rotary_module(n):
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = hf_config({"rope_type": "longrope", "factor": S, "short_factor": SHORT, "long_factor": LONG,
                     "original_max_position_embeddings": L})
    x = torch.zeros(1, n, 4 * D)
    cos_hf, sin_hf = LlamaRotaryEmbedding(cfg)(x, torch.arange(n)[None])  # (1, n, d): the halves repeated
    cos, sin = RotaryEmbedding(D, scaling=LONGROPE).angles(n)  # (n, d/2)
    torch.testing.assert_close(cos, cos_hf[0, :, : D // 2], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(sin, sin_hf[0, :, : D // 2], rtol=1e-4, atol=1e-4)


# --- argument checks ------------------------------------------------------------------------------------------

BAD = [
    ({**LLAMA3, "low_freq_factor": 4.0, "high_freq_factor": 4.0},
     "scaling['high_freq_factor'] must be greater than scaling['low_freq_factor'] (the kept band is the shorter "
     "wavelengths); got low_freq_factor=4, high_freq_factor=4"),
    ({**LLAMA3, "low_freq_factor": 0},
     "scaling['low_freq_factor'] must be a finite number > 0 (wavelengths above L / low_freq_factor are divided by "
     "the factor); got 0"),
    ({**LLAMA3, "high_freq_factor": float("nan")},
     "scaling['high_freq_factor'] must be a finite number > 0 (wavelengths below L / high_freq_factor are kept); "
     "got nan"),
    ({"type": "llama3", "factor": 8.0},
     "scaling type 'llama3' needs 'original_max_position' (the trained context, an int >= 1); got None"),
    ({**LLAMA3, "beta_fast": 32},
     "unknown RoPE scaling keys ['beta_fast'] for type 'llama3'; known: ['factor', 'high_freq_factor', "
     "'low_freq_factor', 'original_max_position', 'type']"),
    ({**LONGROPE, "short_factor": SHORT[:-1]},
     "scaling type 'longrope' needs scaling['short_factor'], a list of head_dim/2 = 8 finite numbers > 0 (one rescale "
     f"factor per frequency); got {SHORT[:-1]!r}"),
    ({**LONGROPE, "long_factor": [1.0] * 7 + [0.0]},
     "scaling type 'longrope' needs scaling['long_factor'], a list of head_dim/2 = 8 finite numbers > 0 (one rescale "
     f"factor per frequency); got {[1.0] * 7 + [0.0]!r}"),
    ({k: v for k, v in LONGROPE.items() if k != "long_factor"},
     "scaling type 'longrope' needs scaling['long_factor'], a list of head_dim/2 = 8 finite numbers > 0 (one rescale "
     "factor per frequency); got None"),
    ({**LONGROPE, "attention_factor": -1.0},
     "scaling['attention_factor'] must be a finite number > 0 (None for sqrt(1 + ln s / ln L)); got -1.0"),
    ({**LONGROPE, "original_max_position": 0},
     "scaling type 'longrope' needs 'original_max_position' (the trained context, an int >= 1); got 0"),
    ({**LONGROPE, "factor": 0.5},
     "scaling['factor'] must be a finite number >= 1 (the context extension); got 0.5"),
]


@pytest.mark.parametrize("scaling,message", BAD, ids=[m[:50] for _, m in BAD])
def test_bad_llama3_and_longrope_settings_are_refused_by_name(scaling, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        RotaryEmbedding(D, scaling=scaling)
