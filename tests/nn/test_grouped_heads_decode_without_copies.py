"""Decoding one token with grouped key/value heads attends each kv head once for its whole group
(no per-step copy of the cache by ``repeat_kv``), with the same numbers as the copied heads."""

from __future__ import annotations

import importlib

import pytest
import torch

import attnlab

mh = importlib.import_module("attnlab.nn.backends")  # the Dense backend repeats the heads


@pytest.mark.parametrize("padding", [False, True])
def test_grouped_decode_steps_equal_the_full_pass_and_copy_no_cache(padding, monkeypatch):
    torch.manual_seed(0)
    m = attnlab.nn.MultiHeadAttention(32, 8, num_kv_heads=2).double().eval()
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    real = torch.ones(3, 7, dtype=torch.bool)
    if padding:
        real[1, :3] = False  # left padding
    with torch.no_grad():
        full, _ = m(x, causal=True, mask=real if padding else None)
        copies = []
        real_repeat = mh.repeat_kv
        monkeypatch.setattr(mh, "repeat_kv", lambda t, g: copies.append(t.shape) or real_repeat(t, g))
        cache = attnlab.nn.LayerCache()
        prefill, _ = m(x[:, :4], causal=True, cache=cache, mask=real[:, :4] if padding else None)
        n_prefill = len(copies)
        steps = [m(x[:, i : i + 1], causal=True, cache=cache, mask=real[:, : i + 1] if padding else None)[0]
                 for i in range(4, 7)]
    assert len(copies) == n_prefill == 2  # the prefill copies once per k and v; the steps never
    got = torch.cat([prefill, *steps], 1)
    keep = real[..., None] if padding else torch.ones_like(full, dtype=torch.bool)
    torch.testing.assert_close(torch.where(keep, got, 0.0), torch.where(keep, full, 0.0), rtol=1e-12, atol=1e-12)


def test_weights_on_request_still_come_per_query_head():
    torch.manual_seed(1)
    m = attnlab.nn.MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    cache = attnlab.nn.LayerCache()
    with torch.no_grad():
        m(x[:, :4], causal=True, cache=cache)
        out, w = m(x[:, 4:], causal=True, cache=cache, need_weights=True)
        again = attnlab.nn.LayerCache()
        m(x[:, :4], causal=True, cache=again)
        fast, _ = m(x[:, 4:], causal=True, cache=again)
    assert w.shape == (2, 4, 1, 5)
    torch.testing.assert_close(out, fast, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_left_padded_decoding_makes_no_pass_over_the_cache_and_keeps_garbage_out(kv_heads, monkeypatch):
    """Padded inputs are zeroed before they are projected into the cache, so a decoding step's
    non-finite rule needs no pass over the cached keys and values; NaN garbage at padded
    positions still reaches nothing."""
    core = importlib.import_module("attnlab.functional.attention")
    monkeypatch.setattr(core, "_host_checks", lambda t: False)  # the GPU's path
    torch.manual_seed(2)
    m = attnlab.nn.MultiHeadAttention(16, 4, num_kv_heads=kv_heads).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    real = torch.ones(2, 6, dtype=torch.bool)
    real[0, :2] = False
    dirty = x.clone()
    dirty[0, :2] = float("nan")  # garbage at the padded positions
    cleaned = []
    real_sanitize = core.sanitize
    monkeypatch.setattr(core, "sanitize", lambda t, *a: cleaned.append(tuple(t.shape)) or real_sanitize(t, *a))
    outs = []
    for inputs in (x, dirty):
        cache = attnlab.nn.LayerCache()
        with torch.no_grad():
            m(inputs[:, :5], causal=True, cache=cache, mask=real[:, :5])
            cleaned.clear()
            step, _ = m(inputs[:, 5:], causal=True, cache=cache, mask=real)
        assert cleaned == []  # the decoding step cleaned nothing
        outs.append(step)
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    assert torch.isfinite(outs[1]).all()
