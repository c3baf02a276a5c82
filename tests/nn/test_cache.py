"""Cached incremental decoding == full recomputation (every positional encoding, grouped-query
heads, chunked prefill), for the module, the GPT and the encoder-decoder; cache mechanics."""

from __future__ import annotations

import pytest
import torch

from attnlab.masks import as_key_mask
from attnlab.models.gpt import GPT, GPTConfig
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.nn import KVCache, LayerCache, MultiHeadAttention

pytestmark = pytest.mark.usefixtures("one_thread")

POSITIONAL = ["learned", "sinusoidal", "rope", "alibi"]


@pytest.mark.parametrize("kw", [{}, {"rope": True}, {"alibi": True}, {"num_kv_heads": 2}, {"num_kv_heads": 1, "rope": True}])
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 2, 1]])
def test_module_cached_equals_full(kw, chunks):
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, **kw).eval()
    x = torch.randn(2, 7, 16)
    full, full_w = m(x, causal=True, need_weights=True)
    cache = LayerCache()
    outs, start = [], 0
    for c in chunks:
        out, w = m(x[:, start:start + c], causal=True, cache=cache, need_weights=True)
        torch.testing.assert_close(w, full_w[:, :, start:start + c, : start + c], atol=1e-6, rtol=0)
        outs.append(out)
        start += c
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=0)
    assert cache.length == 7 and cache.keys.shape == (2, m.num_kv_heads, 7, 4)


def test_cache_with_padding_mask_counts_cached_keys():
    torch.manual_seed(0)
    m = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    pad = torch.tensor([[True] * 5, [False, True, True, True, True]])  # left padding in row 1
    full, _ = m(x, mask=pad, causal=True)
    cache = LayerCache()
    outs = [m(x[:, :2], mask=as_key_mask(pad[:, :2]), causal=True, cache=cache)[0]]
    outs += [m(x[:, i:i + 1], mask=pad[:, : i + 1], causal=True, cache=cache)[0] for i in range(2, 5)]
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_gpt_cached_decoding_equals_recomputation(positional):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=13, block_size=24, dim=32, num_layers=2, num_heads=4, num_kv_heads=2, positional=positional)).eval()
    tokens = torch.randint(0, 13, (2, 16))
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, :4], cache=cache)] + [model(tokens[:, i:i + 1], cache=cache) for i in range(4, 16)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    # greedy generation: with and without the cache the same tokens
    a = model.generate(tokens[:, :3], 12, temperature=0)
    b = model.generate(tokens[:, :3], 12, temperature=0, use_cache=False)
    assert torch.equal(a, b)


def test_transformer_decoder_cache_equals_full():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab=9, tgt_vocab=11, dim=32, num_heads=4)).eval()
    src, tgt = torch.randint(0, 9, (2, 6)), torch.randint(0, 11, (2, 5))
    src_mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    full = model(src, tgt, src_mask=src_mask)
    memory = model.encode(src, src_mask)
    cache = KVCache(len(model.decoder))
    inc = torch.cat([model.decode(tgt[:, i:i + 1], memory, src_mask=src_mask, cache=cache) for i in range(5)], 1)
    torch.testing.assert_close(inc, full, atol=1e-5, rtol=0)


def test_cache_growth_reset_and_errors():
    c = LayerCache()
    for i in range(40):  # grows past the initial capacity
        k = torch.full((1, 2, 1, 4), float(i))
        keys, values = c.update(k, -k)
    assert c.length == 40 and torch.equal(keys[0, 0, :, 0], torch.arange(40.0)) and torch.equal(values, -keys)
    with pytest.raises(ValueError, match="do not fit"):
        c.update(torch.zeros(1, 3, 1, 4), torch.zeros(1, 3, 1, 4))
    c.reset()
    assert c.length == 0 and c.keys is None
    kv = KVCache(3)
    assert len(kv) == 3 and kv.length == 0
    with pytest.raises(ValueError):
        KVCache(0)


def test_cache_keeps_gradients_when_they_are_needed():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(1, 4, 8, requires_grad=True)
    cache = LayerCache()
    out = torch.cat([m(x[:, i:i + 1], causal=True, cache=cache)[0] for i in range(4)], 1)
    out.sum().backward()
    ref_x = x.detach().clone().requires_grad_()
    m(ref_x, causal=True)[0].sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kw", [{}, {"kdim": 6, "vdim": 5}, {"num_kv_heads": 2}])
def test_memory_cache_projects_the_memory_once(kw):
    from attnlab.nn import MemoryCache

    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4, **kw).eval()
    memory = torch.randn(2, 9, m.kdim)
    value = memory if m.vdim == m.kdim else torch.randn(2, 9, m.vdim)
    x = torch.randn(2, 3, 16)
    cache = MemoryCache()
    first, w = m(x, memory, value, cache=cache, need_weights=True)
    ref, ref_w = m(x, memory, value, need_weights=True)
    torch.testing.assert_close(first, ref, atol=0, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=0, rtol=0)
    assert cache.keys.shape == (2, m.num_kv_heads, 9, 4)
    with torch.no_grad():  # change W_k and W_v: a cached step must not project the memory again
        for p in (m.in_proj_weight, m.k_proj_weight, m.v_proj_weight):
            if p is not None:
                p[-8:].add_(1.0)
    again, _ = m(x[:, :1], memory, value, cache=cache)
    torch.testing.assert_close(again, first[:, :1], atol=1e-6, rtol=0)
    assert not torch.allclose(m(x[:, :1], memory, value)[0], first[:, :1])
    # another memory tensor (even with equal values) is projected anew
    fresh, _ = m(x[:, :1], memory.clone(), value.clone(), cache=cache)
    torch.testing.assert_close(fresh, m(x[:, :1], memory, value)[0], atol=1e-6, rtol=0)


def test_memory_cache_fills_in_the_decoder_and_wrong_caches_raise():
    from attnlab.nn import MemoryCache

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab=9, tgt_vocab=11, dim=32, num_heads=4)).eval()
    src = torch.randint(0, 9, (2, 6))
    memory = model.encode(src)
    cache = KVCache(len(model.decoder))
    model.decode(torch.zeros(2, 1, dtype=torch.long), memory, cache=cache)
    assert all(layer.memory.keys is not None and layer.memory.keys.shape[2] == 6 for layer in cache.layers)
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match="MemoryCache is for cross-attention"):
        m(torch.randn(1, 3, 8), cache=MemoryCache())
    with pytest.raises(ValueError, match="attnlab.nn.MemoryCache"):
        m(torch.randn(1, 3, 8), torch.randn(1, 4, 8), cache=LayerCache())
