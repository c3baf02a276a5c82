"""Cached incremental decoding == full recomputation (every positional encoding, grouped-query
heads, chunked prefill), for the module, the GPT and the encoder-decoder; cache mechanics."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.masks import as_key_mask
from attnlab.models.gpt import GPT, GPTConfig
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.nn import KVCache, LayerCache, MemoryCache, MultiHeadAttention, WindowCache

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


# Cache mechanics, checked against values written by hand:
# the buffer capacity rule (max(need, 2·capacity, 16)), the autograd path, from_buffers and its refusals,
# every message exactly, MemoryCache's identity lookup, WindowCache's eviction, positions and chunk masks
# (the policy: key j visible to query i iff j ≤ i and (j < sinks or j > i − window)), reprs and resets.
def heads(n, start=0, b=1, h=2, d=4):
    """(b, h, n, d) whose feature 0 is the token index start … start+n−1, the rest its negatives."""
    t = torch.arange(start, start + n, dtype=torch.float32)[None, None, :, None].expand(b, h, n, d).clone()
    t[..., 1:] *= -1
    return t


def raises(message, call, exc=ValueError):
    with pytest.raises(exc, match="^" + re.escape(message) + "$"):
        call()


# ---- LayerCache -----------------------------------------------------------------------------------

def test_capacity_grows_by_the_rule():
    c = LayerCache()
    assert c.buffers() == (None, None) and c.keys is None and c.values is None
    c.update(heads(3), -heads(3))
    k, v = c.buffers()
    assert k.shape == (1, 2, 16, 4) and v.shape == (1, 2, 16, 4)  # at least 16
    c.update(heads(13, 3), -heads(13, 3))  # exactly full: no new buffer
    assert c.buffers()[0] is k and c.length == 16
    c.update(heads(1, 16), -heads(1, 16))  # 17 > 16: twice the capacity
    k2, _ = c.buffers()
    assert k2.shape[2] == 32 and k2 is not k
    c.update(heads(40, 17), -heads(40, 17))  # 57 > 2·32: the need itself
    assert c.buffers()[0].shape[2] == 64
    c.update(heads(8, 57), -heads(8, 57))  # 65 > 64: doubles to 128
    assert c.buffers()[0].shape[2] == 128
    keys, values = c.keys, c.values
    assert keys.shape == (1, 2, 65, 4) and torch.equal(keys, heads(65)) and torch.equal(values, -heads(65))
    fresh = LayerCache()
    fresh.update(heads(20), heads(20))
    assert fresh.buffers()[0].shape[2] == 20  # a first chunk longer than 16: exactly its length


def test_update_returns_everything_cached_in_order():
    c = LayerCache()
    k1, v1 = c.update(heads(2, b=2), -heads(2, b=2))
    assert torch.equal(k1, heads(2, b=2)) and torch.equal(v1, -heads(2, b=2))
    k2, v2 = c.update(heads(3, 2, b=2), -heads(3, 2, b=2))
    assert torch.equal(k2, heads(5, b=2)) and torch.equal(v2, -heads(5, b=2)) and c.length == 5


def test_values_may_have_another_head_size():
    c = LayerCache()
    k, v = c.update(heads(2), heads(2, d=3))
    assert k.shape == (1, 2, 2, 4) and v.shape == (1, 2, 2, 3)


def test_update_refusals():
    c = LayerCache()
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (2, 3, 4), (1, 2, 3, 4)",
           lambda: c.update(torch.zeros(2, 3, 4), torch.zeros(1, 2, 3, 4)))
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (1, 2, 3, 4), (2, 3, 4)",
           lambda: c.update(torch.zeros(1, 2, 3, 4), torch.zeros(2, 3, 4)))
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (1, 2, 3, 4), (1, 2, 2, 4)",
           lambda: c.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4)))
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (1, 2, 3, 4), (1, 2, 3, 4, 1)",
           lambda: c.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, 1)))
    c.update(heads(3), heads(3))
    for bad in ((2, 2, 1, 4), (1, 3, 1, 4), (1, 2, 1, 5)):  # another b, h_kv, d_h
        raises(f"new keys ({', '.join(map(str, bad))}) do not fit the cached keys (1, 2, 16, 4) "
               "(same b, h_kv and d_h needed); call reset() to start a new sequence",
               lambda bad=bad: c.update(torch.zeros(bad), torch.zeros(bad)))
    assert c.length == 3


def test_autograd_path_concatenates_and_keeps_gradients():
    c = LayerCache()
    k1 = heads(2).requires_grad_()
    k, v = c.update(k1, heads(2))  # only the keys require gradients: still the autograd path
    assert k is k1 and c.buffers()[0] is k1 and c.length == 2
    v2 = heads(1, 2).requires_grad_()
    k, v = c.update(heads(1, 2), v2)
    assert k.shape[2] == 3 and c.buffers()[1].shape[2] == 3 and torch.equal(v, heads(3))
    (k.sum() + v.sum()).backward()
    assert torch.equal(k1.grad, torch.ones_like(k1)) and torch.equal(v2.grad, torch.ones_like(v2))
    # a step without gradients after the autograd ones copies into a fresh buffer of the usual capacity
    k, v = c.update(heads(1, 3), heads(1, 3))
    assert c.buffers()[0].shape[2] == 16 and torch.equal(k, heads(4))


def test_from_buffers_requiring_grad_are_not_written_in_place():
    kb = torch.zeros(1, 2, 10, 4, requires_grad=True)
    c = LayerCache.from_buffers(kb, torch.zeros(1, 2, 10, 4), 2)
    k, _ = c.update(heads(1, 2), heads(1, 2))  # room for it, but the buffer requires grad: a new one
    assert c.buffers()[0] is not kb and torch.all(kb == 0) and k.shape == (1, 2, 3, 4)


def test_from_buffers_by_hand_and_its_refusals():
    kb, vb = heads(8), -heads(8)
    c = LayerCache.from_buffers(kb, vb, np.int64(3))
    assert type(c.length) is int and c.length == 3 and c.buffers() == (kb, vb)
    assert torch.equal(c.keys, heads(3)) and torch.equal(c.values, -heads(3))
    k, v = c.update(heads(2, 100), heads(2, 100))  # written after the first 3, in the same buffer
    assert c.buffers()[0] is kb and torch.equal(k[:, :, 3:], heads(2, 100)) and torch.equal(k[:, :, :3], heads(3))
    assert LayerCache.from_buffers(kb, vb, 8).length == 8 and LayerCache.from_buffers(kb, vb, 0).length == 0
    empty = LayerCache.from_buffers(None, None, 0)
    assert empty.length == 0 and empty.keys is None
    assert LayerCache.from_buffers(kb, None, 0).keys is None and LayerCache.from_buffers(None, vb, 0).keys is None
    raises("a cache of length 3 needs key and value buffers", lambda: LayerCache.from_buffers(None, vb, 3))
    raises("a cache of length 2 needs key and value buffers", lambda: LayerCache.from_buffers(kb, None, 2))
    for k_, v_, n, shapes in (
        (kb, vb, 9, "(1, 2, 8, 4), (1, 2, 8, 4), length 9"),
        (kb, vb, -1, "(1, 2, 8, 4), (1, 2, 8, 4), length -1"),
        (kb, heads(8, d=3), 2, "(1, 2, 8, 4), (1, 2, 8, 3), length 2"),
        (kb[0], vb[0], 2, "(2, 8, 4), (2, 8, 4), length 2"),
    ):
        raises("cache buffers must be k, v of one shape (b, h_kv, capacity, d_h) with length <= capacity; got " + shapes,
               lambda k_=k_, v_=v_, n=n: LayerCache.from_buffers(k_, v_, n))


def test_layer_cache_reset_and_repr():
    c = LayerCache()
    assert repr(c) == "LayerCache(length=0, keys=None)"
    c.update(heads(3), heads(3))
    c.memory.store(torch.zeros(1), torch.zeros(1), heads(5), heads(5))
    assert repr(c) == "LayerCache(length=3, keys=(1, 2, 3, 4))"
    c.reset()
    assert c.length == 0 and c.buffers() == (None, None) and c.memory.keys is None and c.memory.values is None


# ---- MemoryCache ----------------------------------------------------------------------------------

def test_memory_cache_lookup_by_identity_of_both_tensors():
    mc = MemoryCache()
    key, value, other = torch.zeros(1, 2, 3), torch.ones(1, 2, 3), torch.zeros(1, 2, 3)
    assert mc.lookup(key, value) is None and repr(mc) == "MemoryCache(keys=None)"
    kh, vh = heads(2), -heads(2)
    mc.store(key, value, kh, vh)
    got = mc.lookup(key, value)
    assert got[0] is kh and got[1] is vh
    assert mc.lookup(other, value) is None and mc.lookup(key, other) is None and mc.lookup(value, key) is None
    assert mc.lookup(key, key) is None
    assert repr(mc) == "MemoryCache(keys=(1, 2, 2, 4))"
    mc.store(key, key, kh, vh)  # keys and values from one tensor
    assert mc.lookup(key, key)[0] is kh and mc.lookup(key, value) is None
    mc.keys = None  # half filled: not usable
    assert mc.lookup(key, key) is None
    mc.store(key, key, kh, None)
    assert mc.lookup(key, key) is None
    mc.reset()
    assert mc.keys is None and mc.values is None and mc.lookup(key, key) is None


# ---- WindowCache ----------------------------------------------------------------------------------

def allowed(q_pos, k_pos, window, sinks):
    return [[j <= i and (j < sinks or j > i - window) for j in k_pos] for i in q_pos]


def test_window_cache_refusals_and_edges():
    for w in (0, True, 2.0, -1):
        raises(f"window must be an integer >= 1 (the tokens a step attends, itself included); got {w!r}",
               lambda w=w: WindowCache(w))
    for s in (-1, True, 1.5):
        raises(f"sinks must be an integer >= 0; got {s!r}", lambda s=s: WindowCache(3, sinks=s))
    one = WindowCache(1)
    assert one.window == 1 and one.sinks == 0 and one.positions.tolist() == []
    raises("a WindowCache evicts: it has no growing buffers; use LayerCache for beam search", one.buffers,
           NotImplementedError)
    raises("a WindowCache is not built from buffers; use LayerCache.from_buffers",
           lambda: WindowCache.from_buffers(heads(2), heads(2), 1), NotImplementedError)
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (2, 3, 4), (2, 3, 4)",
           lambda: one.update(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4)))
    raises("cache.update expects k, v of shape (b, h_kv, n, d_h); got (1, 2, 3, 4), (1, 2, 1, 4)",
           lambda: one.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 1, 4)))


def test_window_cache_eviction_by_hand():
    c = WindowCache(3, sinks=1)
    assert repr(c) == "WindowCache(window=3, sinks=1, length=0, kept=0)" and c.keys is None and c.values is None
    k, v = c.update(heads(2), -heads(2))  # tokens 0, 1: nothing to evict (kept ≤ sinks + window − 1 = 3)
    assert torch.equal(k, heads(2)) and torch.equal(v, -heads(2)) and c.positions.tolist() == [0, 1]
    k, v = c.update(heads(3, 2), -heads(3, 2))  # tokens 2..4: returns all 5, then keeps 0 and the last 2
    assert torch.equal(k, heads(5)) and torch.equal(v, -heads(5))
    assert c.positions.tolist() == [0, 3, 4] and c.length == 5
    assert c.keys[0, 0, :, 0].tolist() == [0, 3, 4] and c.values[0, 0, :, 0].tolist() == [0, -3, -4]
    assert repr(c) == "WindowCache(window=3, sinks=1, length=5, kept=3)"
    k, _ = c.update(heads(1, 5), heads(1, 5))  # token 5 sees 0, 3, 4, 5
    assert k[0, 0, :, 0].tolist() == [0, 3, 4, 5] and c.positions.tolist() == [0, 4, 5]
    raises("new keys (1, 3, 1, 4) do not fit the cached keys (1, 2, 3, 4) (same b, h_kv and d_h needed); "
           "call reset() to start a new sequence", lambda: c.update(heads(1, h=3), heads(1, h=3)))
    c.reset()
    assert c.length == 0 and c.keys is None and c.positions.tolist() == [] and c.positions.dtype == torch.long


def test_window_cache_chunk_mask_by_hand():
    c = WindowCache(3, sinks=2)
    m0 = c.chunk_mask(4)  # nothing cached: a causal window with sinks over the chunk itself
    assert m0.tolist() == [[allowed(range(4), range(4), 3, 2)]]
    c.update(heads(6), heads(6))  # keeps 0, 1 (sinks) and 4, 5
    assert c.positions.tolist() == [0, 1, 4, 5]
    m = c.chunk_mask(3)
    assert m.shape == (1, 1, 3, 7) and m.dtype == torch.bool  # (b, h, q, k): never read as (b, k) padding
    assert m.tolist() == [[allowed(range(6, 9), [0, 1, 4, 5, 6, 7, 8], 3, 2)]]
    no_sinks = WindowCache(2)
    no_sinks.update(heads(3), heads(3))
    assert no_sinks.chunk_mask(2).tolist() == [[allowed(range(3, 5), [2, 3, 4], 2, 0)]]


def test_window_cache_of_one_keeps_nothing_between_steps():
    c = WindowCache(1)
    for t in range(3):
        k, _ = c.update(heads(1, t), heads(1, t))
        assert k[0, 0, :, 0].tolist() == [t] and c.positions.tolist() == [] and c.keys.shape[2] == 0


# ---- KVCache --------------------------------------------------------------------------------------

def test_kv_cache_policies_refusals_repr_and_reset():
    raises("num_layers must be an integer >= 1; got 0", lambda: KVCache(0))
    raises("sinks=4 needs a window (sinks + window, StreamingLLM); pass window=w too", lambda: KVCache(2, sinks=4))
    one = KVCache(1)
    assert len(one) == 1 and type(one[0]) is LayerCache and one.window is None and one.sinks == 0
    assert repr(one) == "KVCache(layers=1, length=0)"
    w = KVCache(2, window=4)
    assert all(type(layer) is WindowCache and layer.window == 4 and layer.sinks == 0 for layer in w.layers)
    ws = KVCache(3, window=4, sinks=2)
    assert len(ws) == 3 and ws[2].sinks == 2 and ws[0] is not ws[1]
    for layer in ws.layers:
        layer.update(heads(5), heads(5))
    assert ws.length == 5 and repr(ws) == "KVCache(layers=3, length=5, window=4, sinks=2)"
    ws.reset()
    assert ws.length == 0 and all(layer.length == 0 and layer.keys is None for layer in ws.layers)
    one[0].update(heads(2), heads(2))
    assert one.length == 2 and repr(one) == "KVCache(layers=1, length=2)"


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
