"""The modules refuse, when they are built, a size below one, a size that is not an integer, a
dropout outside [0, 1) and a scale that is not finite and positive: one ValueError that names the
argument, the value and what is expected (never an error from inside torch, never a module built
with no attention in it)."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.nn import (
    ECA,
    AdditiveAttention,
    ALiBi,
    AttentionalOutput,
    ChannelAttention,
    DifferentialAttention,
    DotProductAttention,
    KVCache,
    LearnedPositionalEmbedding,
    LinearAttention,
    LuongAttention,
    MultiHeadLatentAttention,
    NeighborhoodAttention2D,
    RotaryEmbedding,
    SASRec,
    SASRecBlock,
    SinusoidalPositionalEncoding,
    SoftcapAttention,
    SpatialAttention,
    SqueezeExcite,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)


def mla(dim=8, heads=2, **kw):
    return lambda: MultiHeadLatentAttention(dim, heads, **{"kv_latent_dim": 4, **kw})


CASES = [
    # multi-head latent attention: every latent and head size
    (mla(kv_latent_dim=0), "kv_latent_dim must be an integer >= 1; got 0"),
    (mla(kv_latent_dim=4.0), "kv_latent_dim must be an integer >= 1; got 4.0"),
    (mla(kv_latent_dim="4"), "kv_latent_dim must be an integer >= 1; got '4'"),
    (mla(q_latent_dim=0), "q_latent_dim must be an integer >= 1; got 0"),
    (mla(q_latent_dim=-1), "q_latent_dim must be an integer >= 1; got -1"),
    (mla(head_dim=0), "head_dim must be an integer >= 1; got 0"),
    (mla(v_head_dim=0), "v_head_dim must be an integer >= 1; got 0"),
    (mla(v_head_dim=-1), "v_head_dim must be an integer >= 1; got -1"),
    (mla(rope_dim=3), "rope_dim must be an even integer >= 2; got 3"),
    (mla(attn_drop=2.0), "attn_drop must be a probability in [0, 1); got 2.0"),
    (mla(attn_drop=-0.1), "attn_drop must be a probability in [0, 1); got -0.1"),
    (mla(dim=8.0), "dim must be an integer >= 1; got 8.0"),
    (mla(heads=True), "num_heads must be an integer >= 1; got True"),
    # differential and linear attention
    (lambda: DifferentialAttention(8.0, 2), "dim must be an integer >= 1; got 8.0"),
    (lambda: DifferentialAttention(8, True), "num_heads must be an integer >= 1; got True"),
    (lambda: DifferentialAttention(8, 2, attn_drop=5), "attn_drop must be a probability in [0, 1); got 5"),
    (lambda: LinearAttention(8.0, 2), "dim must be an integer >= 1; got 8.0"),
    (lambda: LinearAttention(8, -1), "num_heads must be an integer >= 1; got -1"),
    # caches and positions
    (lambda: KVCache(2.0), "num_layers must be an integer >= 1; got 2.0"),
    (lambda: KVCache("2"), "num_layers must be an integer >= 1; got '2'"),
    (lambda: KVCache(True), "num_layers must be an integer >= 1; got True"),
    (lambda: ALiBi(2.0), "num_heads must be an integer >= 1; got 2.0"),
    (lambda: ALiBi(True), "num_heads must be an integer >= 1; got True"),
    (lambda: ALiBi(2)(-1, 3), "q_len must be an integer >= 0; got -1"),
    (lambda: ALiBi(2)(3, -1), "k_len must be an integer >= 0; got -1"),
    (lambda: SinusoidalPositionalEncoding(0), "SinusoidalPositionalEncoding needs an even dim >= 2; got 0"),
    (lambda: SinusoidalPositionalEncoding(2.0), "SinusoidalPositionalEncoding needs an even dim >= 2; got 2.0"),
    (lambda: LearnedPositionalEmbedding(0, 4), "max_len must be an integer >= 1; got 0"),
    (lambda: LearnedPositionalEmbedding(-1, 4), "max_len must be an integer >= 1; got -1"),
    (lambda: LearnedPositionalEmbedding(4, 0), "dim must be an integer >= 1; got 0"),
    (lambda: LearnedPositionalEmbedding(4, 2.0), "dim must be an integer >= 1; got 2.0"),
    # the classic modules without parameters, the attentional output, the Transformer layers
    (lambda: DotProductAttention(scale=float("nan")),
     "scale must be a finite positive number (or None for 1/sqrt(d)); got nan"),
    (lambda: DotProductAttention(attn_drop=1.0), "attn_drop must be a probability in [0, 1); got 1.0"),
    (lambda: SoftcapAttention(scale=-1.0), "scale must be a finite positive number (or None for 1/sqrt(d)); got -1.0"),
    (lambda: SoftcapAttention(attn_drop=-0.5), "attn_drop must be a probability in [0, 1); got -0.5"),
    (lambda: AttentionalOutput(0, 2, 3, 4), "context_dim must be an integer >= 1; got 0"),
    (lambda: AttentionalOutput(2.0, 2, 3, 4), "context_dim must be an integer >= 1; got 2.0"),
    (lambda: AttentionalOutput(2, 2, 3, -1), "vocab_size must be an integer >= 1; got -1"),
    (lambda: AttentionalOutput(2, 2, 3, 4, dropout=2.0), "dropout must be a probability in [0, 1]; got 2.0"),
    (lambda: TransformerEncoderLayer(8, 2, ffn_dim=0), "ffn_dim must be an integer >= 1; got 0"),
    (lambda: TransformerEncoderLayer(8, 2, dropout=3.0), "dropout must be a probability in [0, 1); got 3.0"),
    (lambda: TransformerDecoderLayer(8, 2, layer_norm_eps=0.0), "layer_norm_eps must be a finite number > 0; got 0.0"),
    (lambda: TransformerDecoderLayer(8.0, 2), "dim must be an integer >= 1; got 8.0"),
    # the classic keyed modules and the vision gates: bools, floats and budgets
    (lambda: AdditiveAttention(True, 4, 3), "query_dim must be a positive int; got True"),
    (lambda: AdditiveAttention(4, 4, 3, max_elems=-1), "max_elems must be an integer >= 1; got -1"),
    (lambda: LuongAttention(4.0, 4), "query_dim must be an integer >= 1; got 4.0"),
    (lambda: LuongAttention(0, 4), "query_dim must be an integer >= 1; got 0"),
    (lambda: LuongAttention(4, 4, score="concat", attn_dim=0), "attn_dim must be an integer >= 1; got 0"),
    (lambda: LuongAttention(4, 4, max_elems=0), "max_elems must be an integer >= 1; got 0"),
    (lambda: NeighborhoodAttention2D(4, 2, kernel_size=3, block=2.0), "block must be an integer; got 2.0"),
    (lambda: ChannelAttention(True), "channels must be a positive int; got True"),
    (lambda: SqueezeExcite(4, hidden=True), "hidden must be a positive int or None; got True"),
    (lambda: SpatialAttention(True), "kernel_size must be a positive odd int (the map keeps its size); got True"),
    (lambda: ECA(4, gamma=0), "gamma must be a finite number > 0 (ψ(C) = |(log₂ C + beta) / gamma|_odd); got 0"),
    (lambda: ECA(4, beta=float("nan")),
     "beta must be a finite number (ψ(C) = |(log₂ C + beta) / gamma|_odd); got nan"),
    # SASRec: a model without attention blocks is refused
    (lambda: SASRec(10, 8, 5, num_layers=-1), "num_layers must be an integer >= 1; got -1"),
    (lambda: SASRec(10, 8, 5, num_layers=0), "num_layers must be an integer >= 1; got 0"),
    (lambda: SASRec(10, 8, 5, num_heads=0), "num_heads must be an integer >= 1; got 0"),
    (lambda: SASRec(10, 0, 5), "dim must be an integer >= 1; got 0"),
    (lambda: SASRec(10, 8.0, 5), "dim must be an integer >= 1; got 8.0"),
    (lambda: SASRec(10, 8, 5, dropout=2.0), "dropout must be a probability in [0, 1); got 2.0"),
    (lambda: SASRecBlock(8, 0), "num_heads must be an integer >= 1; got 0"),
]


@pytest.mark.parametrize("make,message", CASES, ids=[m for _, m in CASES])
def test_a_bad_size_or_rate_is_one_value_error_naming_it(make, message):
    with pytest.raises(ValueError) as e:
        make()
    assert str(e.value) == message


def test_the_sizes_that_are_allowed_still_build():
    assert MultiHeadLatentAttention(8, 2, kv_latent_dim=1, q_latent_dim=1, head_dim=1, v_head_dim=1, rope_dim=2).rope_dim == 2
    assert len(SASRec(10, 8, 5, num_layers=1).blocks) == 1
    assert len(KVCache(1)) == 1
    assert DotProductAttention(scale=0.5, attn_drop=0.0).scale == 0.5
    assert LearnedPositionalEmbedding(1, 1).weight.shape == (1, 1)
    assert AttentionalOutput(2, 2, 3, 4, dropout=1.0).dropout.p == 1.0  # nn.Dropout's p = 1 drops everything


@pytest.mark.parametrize("kind", ["ntk", "dynamic"])
def test_rope_with_a_head_of_two_features_rotates_by_the_position_under_ntk_scaling(kind):
    """One feature pair: θ_0 = base⁰ = 1 whatever NTK makes of the base, so the pair turns by one radian
    per position (the scaled base used to divide by d_h − 2 = 0)."""
    rope = RotaryEmbedding(2, scaling={"type": kind, "factor": 4.0, "original_max_position": 4})
    assert rope.inv_freq.tolist() == [1.0]
    assert rope.inv_freq_at(40).tolist() == [1.0]  # dynamic past L: the same single frequency
    x = torch.tensor([[[[1.0, 0.0]] * 40]])  # (1, 1, 40, 2)
    out = rope(x)
    want = torch.tensor([[math.cos(t), math.sin(t)] for t in range(40)])
    torch.testing.assert_close(out[0, 0], want, rtol=1e-5, atol=1e-5)
