"""Decoding one token with grouped key/value heads attends each kv head once for its whole group
(no per-step copy of the cache by ``repeat_kv``), with the same numbers as the copied heads."""

from __future__ import annotations

import importlib

import pytest
import torch

import attnlab

mh = importlib.import_module("attnlab.nn.multihead")


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
