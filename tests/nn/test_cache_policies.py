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


def rope_ref(x, pos, base=10000.0):
    """RoFormer: rotate pairs (x_2i, x_2i+1) of x (..., n, d) by pos·base^(−2i/d)."""
    d = x.shape[-1]
    a = pos[:, None].double() * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (n, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * a.cos() - x2 * a.sin(), x1 * a.sin() + x2 * a.cos()], -1).flatten(-2)


def test_10000_tokens_memory_flat_and_every_step_equals_the_restricted_reference():
    """One token at a time for 10,000 tokens: the kept keys never exceed sinks + window − 1 between
    steps, and every step's output equals softmax attention over its sinks + window, written here
    from the equations (projections, RoPE at absolute positions, softmax, W_o) in float64."""
    n, window, sinks, h, dim = 10_000, 16, 4, 2, 8
    with torch.no_grad():
        (mod,) = stack(dim=dim, heads=h, layers=1)
        mod = mod.float()
        cache = KVCache(1, window=window, sinks=sinks)
        x = torch.randn(1, n, dim)
        outs, sizes = [], set()
        for t in range(n):
            outs.append(mod(x[:, t : t + 1], causal=True, cache=cache[0])[0])
            sizes.add(cache[0].keys.shape[2])
        got = torch.cat(outs, 1)[0].double()  # (n, dim)
        assert max(sizes) == sinks + window - 1 and cache.length == n

        w, b = mod.in_proj_weight.double(), mod.in_proj_bias.double()
        q, k, v = (x[0].double() @ w.T + b).split(dim, -1)  # (n, dim) each
        dh = dim // h
        q, k, v = (t.view(n, h, dh).transpose(0, 1) for t in (q, k, v))  # (h, n, d_h)
        pos = torch.arange(n)
        q, k = rope_ref(q, pos), rope_ref(k, pos)
        t = torch.arange(n)[:, None]
        sink_idx, win_idx = torch.arange(sinks).expand(n, sinks), t - window + 1 + torch.arange(window)  # (n, s), (n, w)
        kept = torch.cat([sink_idx, win_idx], 1)  # (n, s + w): the sinks, then the window
        valid = torch.cat([sink_idx <= t, win_idx >= sinks], 1)  # a sink not yet seen; a window slot that is a sink or < 0
        kk, vv = k[:, kept.clamp(min=0)], v[:, kept.clamp(min=0)]  # (h, n, s + w, d_h)
        e = (q.unsqueeze(2) * kk).sum(-1) / dh**0.5  # (h, n, s + w)
        a = torch.softmax(e.masked_fill(~valid, float("-inf")), -1)
        o = (a.unsqueeze(-1) * vv).sum(2).transpose(0, 1).reshape(n, dim)  # (n, dim)
        ref = o @ mod.out_proj.weight.double().T + mod.out_proj.bias.double()
        torch.testing.assert_close(got, ref, atol=2e-5, rtol=1e-4)


def test_unbounded_cache_grows():
    with torch.no_grad():
        (mod,) = stack(dim=8, heads=2, layers=1)
        unbounded = KVCache(1)
        x = torch.randn(1, 300, 8, dtype=torch.float64)
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
