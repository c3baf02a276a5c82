"""KV-cache policies (sliding window, sinks + window / StreamingLLM) against recomputation: the
cached decoding equals full attention restricted to the same keys at every step, and memory stays
flat over 10,000 tokens."""

from __future__ import annotations

import pytest
import torch

from attnlab.nn import KVCache, LayerCache, MultiHeadAttention, WindowCache

pytestmark = pytest.mark.usefixtures("one_thread")


def allowed(n: int, window: int, sinks: int) -> torch.Tensor:
    """Written from the policy: query i sees key j iff j ≤ i and (j < sinks or j > i − window)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & ((j < sinks) | (j > i - window))


def stack(dim=16, heads=4, layers=2, **kw):
    torch.manual_seed(0)
    return [MultiHeadAttention(dim, heads, rope=True, **kw).double().eval() for _ in range(layers)]


def full_reference(mods, x, window, sinks):
    m = allowed(x.shape[1], window, sinks)
    for mod in mods:
        x = x + mod(x, mask=m)[0]  # residual stack: later layers read the masked outputs of earlier ones
    return x


def decode(mods, x, cache: KVCache, chunks):
    outs, start = [], 0
    for c in chunks:
        h = x[:, start : start + c]
        for i, mod in enumerate(mods):
            layer = cache[i]
            mask = layer.chunk_mask(c) if (c > 1 and isinstance(layer, WindowCache)) else None
            h = h + mod(h, causal=True, cache=layer, mask=mask)[0]
        outs.append(h)
        start += c
    return torch.cat(outs, 1)


@pytest.mark.parametrize("window,sinks", [(8, 0), (8, 4), (1, 2), (30, 1)])
@pytest.mark.parametrize("chunks", ["ones", "prefill"])
@torch.no_grad()
def test_window_cache_equals_restricted_full_attention(window, sinks, chunks):
    mods = stack(num_kv_heads=2)
    n = 120
    x = torch.randn(2, n, 16, dtype=torch.float64)
    ref = full_reference(mods, x, window, sinks)
    sizes = [1] * n if chunks == "ones" else [37, 1, 1, 20] + [1] * (n - 59)
    cache = KVCache(len(mods), window=window, sinks=sinks)
    got = decode(mods, x, cache, sizes)
    torch.testing.assert_close(got, ref)
    assert cache.length == n
    kept = cache[0].positions.tolist()
    assert kept == sorted(set(range(min(sinks, n))) | set(range(n - window + 1, n)))


def test_step_weights_cover_exactly_the_kept_keys():
    with torch.no_grad():
        (mod,) = stack(layers=1)
        cache = KVCache(1, window=5, sinks=2)
        x = torch.randn(1, 40, 16, dtype=torch.float64)
        for t in range(40):
            _, w = mod(x[:, t : t + 1], causal=True, cache=cache[0], need_weights=True)
            expect = allowed(40, 5, 2)[t].nonzero()[:, 0]
            assert w.shape[-1] == len(expect)  # (b, h, 1, kept + 1): only sinks + window reach the softmax
            torch.testing.assert_close(w.sum(-1), torch.ones(1, 4, 1, dtype=torch.float64))


def test_memory_flat_over_10000_tokens_and_unbounded_grows():
    with torch.no_grad():
        (mod,) = stack(dim=8, heads=2, layers=1)
        mod = mod.float()
        sink, unbounded = KVCache(1, window=16, sinks=4), KVCache(1)
        x = torch.randn(1, 10_000, 8)
        sizes = set()
        for t in range(10_000):
            mod(x[:, t : t + 1], causal=True, cache=sink[0])
            sizes.add(sink[0].keys.shape[2])
        assert max(sizes) == 4 + 16 - 1 and sink.length == 10_000  # flat: sinks + window − 1 kept between steps
        for t in range(300):
            mod(x[:, t : t + 1], causal=True, cache=unbounded[0])
        assert unbounded[0].keys.shape[2] == 300


def test_bad_arguments():
    with pytest.raises(ValueError, match="window"):
        WindowCache(0)
    with pytest.raises(ValueError, match="sinks"):
        WindowCache(4, sinks=-1)
    with pytest.raises(ValueError, match="needs a window"):
        KVCache(2, sinks=4)
    assert isinstance(KVCache(1)[0], LayerCache) and not isinstance(KVCache(1)[0], WindowCache)
