"""The sparse modules' defaults: the pairs each one allows (written out by hand from Longformer's window
and global tokens, the local window, BigBird's blocks), the projections, block and dropout they pass on."""

from __future__ import annotations

import pytest
import torch

from attnlab import patterns as P
from attnlab.nn import BigBirdAttention, LocalAttention, LongformerAttention, SparseAttention


def band(n, before, after):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j >= i - before) & (j <= i + after)


def globals_(n, idx):
    g = torch.zeros(n, dtype=torch.bool)
    g[list(idx)] = True
    return g[:, None] | g[None, :]


N = 150  # more than the default window of 64 on each side


def test_sparse_attention_defaults_and_message():
    m = SparseAttention(16, pattern=P.causal())
    assert m.num_heads == 8 and m.in_proj_bias is None and m.attn_drop == 0.0 and m.block == 64
    assert m.proj_drop.p == 0.0
    m = SparseAttention(16, 2, pattern=P.causal(), qkv_bias=True, attn_drop=0.25, proj_drop=0.5, block=8)
    assert m.num_heads == 2 and m.in_proj_bias is not None and m.attn_drop == 0.25 and m.proj_drop.p == 0.5
    assert m.block == 8
    with pytest.raises(ValueError) as e:
        SparseAttention(16, pattern="causal")
    assert str(e.value) == "pattern must be an attnlab.patterns.Pattern; got str"
    with pytest.raises(ValueError) as e:
        SparseAttention(16, pattern=None)
    assert str(e.value) == "pattern must be an attnlab.patterns.Pattern; got NoneType"


def test_local_window_defaults_to_64_on_each_side():
    m = LocalAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.block == 64
    assert torch.equal(m.pattern.materialize(N), band(N, 64, 64))
    causal = LocalAttention(16, 4, window=3, causal=True)
    assert causal.num_heads == 4
    assert torch.equal(causal.pattern.materialize(20), band(20, 3, 0))
    assert torch.equal(LocalAttention(16, window=3).pattern.materialize(20), band(20, 3, 3))
    kw = LocalAttention(16, 2, window=2, qkv_bias=True, block=4)
    assert kw.in_proj_bias is not None and kw.block == 4


def test_longformer_defaults_window_64_and_token_0_global():
    m = LongformerAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.block == 64
    assert torch.equal(m.pattern.materialize(N), band(N, 64, 64) | globals_(N, [0]))
    m = LongformerAttention(16, 4, window=2, global_indices=(3, 7), block=8)
    assert m.num_heads == 4 and m.block == 8
    assert torch.equal(m.pattern.materialize(20), band(20, 2, 2) | globals_(20, [3, 7]))


def test_bigbird_defaults():
    m = BigBirdAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.block == 64
    allowed = m.pattern.materialize(4 * 64)
    random = P.random_blocks(2, 64, 0).materialize(4 * 64)
    assert torch.equal(allowed, band(256, 64, 64) | globals_(256, [0]) | random)
    # two random key blocks of 64 per query block of 64 (of 4): each row allows 128 random keys
    assert torch.equal(random.sum(-1), torch.full((256,), 128))
    m = BigBirdAttention(16, 4, window=1, global_indices=(2,), random_per_row=1, random_block=4, seed=3, block=4)
    assert m.num_heads == 4 and m.block == 4
    assert torch.equal(m.pattern.materialize(16),
                       band(16, 1, 1) | globals_(16, [2]) | P.random_blocks(1, 4, 3).materialize(16))


@pytest.mark.parametrize("make", [
    lambda: LocalAttention(8, 2, window=1, qkv_bias=True, attn_drop=0.5, block=4),
    lambda: LongformerAttention(8, 2, window=1, qkv_bias=True, attn_drop=0.5, block=4),
    lambda: BigBirdAttention(8, 2, window=1, random_block=4, qkv_bias=True, attn_drop=0.5, block=4),
])
def test_keyword_arguments_reach_multihead(make):
    m = make()
    assert m.in_proj_bias is not None and m.attn_drop == 0.5 and m.block == 4


def test_further_keywords_reach_multihead():
    m = SparseAttention(16, 4, pattern=P.causal(), num_kv_heads=2)
    assert m.num_kv_heads == 2 and m.in_proj_weight.shape == ((4 + 2 * 2) * 4, 16)
