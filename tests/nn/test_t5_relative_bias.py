"""T5's bucketed relative-position bias and ``MultiHeadAttention(scale=...)``: a tiny T5 attention layer of
transformers rebuilt with copied weights (encoder and decoder, float64), the bucket function against values
worked out by hand, and the scale on every attention path against a float64 NumPy reference."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import patterns
from attnlab.nn import KVCache, MultiHeadAttention, T5RelativePositionBias
from attnlab.nn.backends import BlockSparse, ContextParallel
from attnlab.nn.positional import t5_relative_position_bucket

t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
T5Config = pytest.importorskip("transformers").T5Config


def by_hand(rel: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> int:
    """The bucket of key − query = rel, from the paper's description, in float64 (exact away from the edges)."""
    half = num_buckets // 2 if bidirectional else num_buckets
    upper = half if bidirectional and rel > 0 else 0
    n = abs(rel) if bidirectional else max(-rel, 0)
    exact = half // 2
    if n < exact:
        return upper + n
    return upper + min(exact + int(math.log(n / exact) / math.log(max_distance / exact) * (half - exact)), half - 1)


# Written out (32 buckets, max distance 128). Bidirectional: 16 per side, 8 exact; beyond, 8 + ⌊ln(n/8)/ln 16 · 8⌋,
# e.g. n = 12: ln 1.5 / ln 16 · 8 = 1.17 → 9; n = 30: 3.81 → 11; n = 100: 7.29 → 15; keys after the query + 16.
BIDIRECTIONAL = {0: 0, -1: 1, -3: 3, 3: 19, -7: 7, -8: 8, 8: 24, -12: 9, 12: 25, -30: 11, 30: 27, -100: 15, 100: 31,
                 -128: 15, 1000: 31, -1000: 15}
# Causal: 32 buckets for the past, 16 exact; beyond, 16 + ⌊ln(n/16)/ln 8 · 16⌋: n = 20 → 17, n = 100 → 30 (14.1),
# n = 127 → 31 (15.94); keys after the query are distance 0.
CAUSAL = {5: 0, 1: 0, 0: 0, -5: 5, -15: 15, -16: 16, -20: 17, -100: 30, -127: 31, -500: 31}


@pytest.mark.parametrize("bidirectional,table", [(True, BIDIRECTIONAL), (False, CAUSAL)])
def test_buckets_of_a_few_distances_by_hand(bidirectional, table):
    rel = torch.tensor(list(table))
    got = t5_relative_position_bucket(rel, bidirectional=bidirectional)
    assert got.tolist() == list(table.values())
    assert [by_hand(r, bidirectional) for r in table] == list(table.values())


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 12), (6, 7)])
def test_buckets_equal_transformers_over_every_distance(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-400, 401)
    want = t5.T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    got = t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                      max_distance=max_distance)
    assert torch.equal(got, want) and got.min() >= 0 and got.max() == num_buckets - 1


def rebuilt(decoder: bool, num_buckets: int, max_distance: int, seed: int = 0):
    """transformers' T5Attention (float64) and attnlab's module + bias with its weights copied."""
    torch.manual_seed(seed)
    cfg = T5Config(d_model=16, d_kv=4, num_heads=4, dropout_rate=0.0, is_decoder=decoder,
                   relative_attention_num_buckets=num_buckets, relative_attention_max_distance=max_distance)
    theirs = t5.T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0).double().eval()
    with torch.no_grad():
        theirs.relative_attention_bias.weight.normal_()  # T5 initialises it to zeros only in the pretrained model
    ours = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False, scale=1.0).double().eval()
    bias = T5RelativePositionBias(4, bidirectional=not decoder, num_buckets=num_buckets,
                                  max_distance=max_distance).double()
    with torch.no_grad():
        ours.in_proj_weight.copy_(torch.cat([theirs.q.weight, theirs.k.weight, theirs.v.weight]))
        ours.out_proj.weight.copy_(theirs.o.weight)
        bias.relative_attention_bias.weight.copy_(theirs.relative_attention_bias.weight)
    return theirs, ours, bias


@pytest.mark.parametrize("num_buckets,max_distance,n", [(32, 128, 40), (8, 12, 24)])
def test_encoder_layer_equals_transformers_t5(num_buckets, max_distance, n):
    theirs, ours, bias = rebuilt(False, num_buckets, max_distance)
    x = torch.randn(2, n, 16, dtype=torch.float64)
    want = theirs(x)[0]
    got, _ = ours(x, mask=bias(n, n))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    want_bias = theirs.compute_bias(n, n)
    assert bias(n, n).shape == (1, 4, n, n) and torch.equal(bias(n, n), want_bias)


@pytest.mark.parametrize("num_buckets,max_distance,n", [(32, 128, 40), (8, 12, 24)])
def test_decoder_layer_equals_transformers_t5(num_buckets, max_distance, n):
    theirs, ours, bias = rebuilt(True, num_buckets, max_distance, seed=1)
    x = torch.randn(2, n, 16, dtype=torch.float64)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    additive = torch.zeros(1, 1, n, n, dtype=torch.float64).masked_fill(future, torch.finfo(torch.float64).min)
    want = theirs(x, mask=additive)[0]
    got, _ = ours(x, mask=bias(n, n), causal=True)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_cached_decoding_with_the_bias_offset_equals_recomputation():
    _, ours, bias = rebuilt(True, 8, 12, seed=2)
    x = torch.randn(2, 15, 16, dtype=torch.float64)
    full, _ = ours(x, mask=bias(15, 15), causal=True)
    cache = KVCache(1)
    steps = [ours(x[:, t:t + 1], mask=bias(1, t + 1, offset=t), causal=True, cache=cache[0])[0] for t in range(15)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-12, atol=1e-12)
    assert torch.equal(bias(1, 15, offset=14), bias(15, 15)[:, :, -1:])


def test_the_bias_module_refuses_bad_settings_by_name():
    cases = [(dict(num_heads=0), "num_heads must be an integer >= 1; got 0"),
             (dict(num_heads=4, num_buckets=2), "num_buckets must be an integer >= 4; got 2"),
             (dict(num_heads=4, bidirectional=False, num_buckets=1), "num_buckets must be an integer >= 2; got 1"),
             (dict(num_heads=4, num_buckets=32, max_distance=8), "max_distance must be an integer >= 9; got 8"),
             (dict(num_heads=4, max_distance=64.0), "max_distance must be an integer >= 9; got 64.0")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            T5RelativePositionBias(**kwargs)
    with pytest.raises(ValueError, match=re.escape("offset must be an integer >= 0; got -1")):
        T5RelativePositionBias(2)(1, 3, offset=-1)
    assert T5RelativePositionBias(2)(0, 3).shape == (1, 2, 0, 3)


# --- MultiHeadAttention(scale=...) on every path -------------------------------------------------------------


def np_attention(m: MultiHeadAttention, x: torch.Tensor, scale: float, allow: np.ndarray) -> np.ndarray:
    """float64 NumPy multi-head attention with the module's weights (grouped heads repeated), scores × scale."""
    w = m.projection_weights()
    xs = x.double().numpy()
    h, h_kv, d = m.num_heads, m.num_kv_heads, m.head_dim

    def heads(wt, count):
        y = xs @ wt.detach().double().numpy().T  # (b, n, count·d)
        return np.repeat(y.reshape(*y.shape[:2], count, d).transpose(0, 2, 1, 3), h // count, axis=1)

    q, k, v = heads(w["w_q"], h), heads(w["w_k"], h_kv), heads(w["w_v"], h_kv)
    s = np.where(allow, q @ k.transpose(0, 1, 3, 2) * scale, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ctx = (p / p.sum(-1, keepdims=True)) @ v  # (b, h, n, d)
    merged = ctx.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], h * d)
    return merged @ m.out_proj.weight.detach().double().numpy().T


@pytest.mark.parametrize("need_weights", [False, True])
def test_scale_on_the_dense_path(need_weights):
    torch.manual_seed(3)
    m = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False, scale=0.9).double().eval()
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    out, _ = m(x, causal=True, need_weights=need_weights)
    allow = np.tril(np.ones((7, 7), dtype=bool))
    np.testing.assert_allclose(out.detach().numpy(), np_attention(m, x, 0.9, allow), rtol=1e-10, atol=1e-12)
    default = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False).double().eval()
    default.load_state_dict(m.state_dict())
    assert not torch.allclose(default(x, causal=True)[0], out)  # the scale is used, not 1/√d_h
    assert "scale=0.9" in m.extra_repr()


def test_scale_on_the_grouped_decoding_step():
    torch.manual_seed(4)
    m = MultiHeadAttention(16, 4, num_kv_heads=2, qkv_bias=False, proj_bias=False, scale=1.0).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    cache = KVCache(1)
    steps = torch.cat([m(x[:, t:t + 1], causal=True, cache=cache[0])[0] for t in range(6)], 1)
    want = np_attention(m, x, 1.0, np.tril(np.ones((6, 6), dtype=bool)))
    np.testing.assert_allclose(steps.detach().numpy(), want, rtol=1e-10, atol=1e-12)


def test_scale_on_the_sparse_path():
    torch.manual_seed(5)
    window = patterns.sliding_window(2)
    m = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False, scale=1.0, backend=BlockSparse(window, block=4)).double().eval()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    out, weights = m(x, need_weights=True)
    allow = window.materialize(12).numpy()
    np.testing.assert_allclose(out.detach().numpy(), np_attention(m, x, 1.0, allow), rtol=1e-10, atol=1e-12)
    dense = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False, scale=1.0).double().eval()
    dense.load_state_dict(m.state_dict())
    _, want_weights = dense(x, mask=torch.as_tensor(allow), need_weights=True)
    torch.testing.assert_close(weights, want_weights, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("scale,shown", [(0, "0.0"), (-1.0, "-1.0"), (float("nan"), "nan"), ("1", "'1'"), (True, "True")])
def test_a_bad_scale_is_refused_by_name(scale, shown):
    message = f"scale must be a finite positive number (or None for 1/sqrt(d)); got {shown}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        MultiHeadAttention(16, 4, scale=scale)



@pytest.mark.parametrize("mode", ["ring", "ulysses"])
def test_scale_on_the_context_parallel_path(one_process_group, mode):
    torch.manual_seed(6)
    m = MultiHeadAttention(16, 4, qkv_bias=False, proj_bias=False, scale=1.0,
                           backend=ContextParallel(mode=mode)).double().eval()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    out, _ = m(x, causal=True)
    want = np_attention(m, x, 1.0, np.tril(np.ones((8, 8), dtype=bool)))
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)


def test_a_module_with_its_own_scale_is_not_converted_to_torch():
    from attnlab.nn.convert import to_torch

    with pytest.raises(ValueError, match=r"scale=1.0"):
        to_torch(MultiHeadAttention(8, 2, scale=1.0))
    assert isinstance(to_torch(MultiHeadAttention(8, 2)), torch.nn.MultiheadAttention)
