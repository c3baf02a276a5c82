"""A window cache's chunk mask is (1, 1, q, k): a chunk of n tokens in a batch of n is never read as a
(b, k) padding mask (which gave outputs off by up to 0.9, silently).

Reference, written here in NumPy float64: multi-head attention over the whole sequence with the
cache's policy (query i sees key j iff j ≤ i and (j < sinks or j > i − window)), from the module's
own projection weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.nn import MultiHeadAttention, WindowCache

DIM, HEADS = 8, 2


def _numpy_mha(m, x, window, sinks):
    p = {k: v.detach().numpy() for k, v in m.projection_weights().items()}
    b, n, _ = x.shape
    split = lambda t: t.reshape(b, n, HEADS, DIM // HEADS).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = (split(x @ p[f"w_{c}"].T + p[f"b_{c}"]) for c in "qkv")
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allow = (j <= i) & ((j < sinks) | (j > i - window))
    s = np.where(allow, q @ k.transpose(0, 1, 3, 2) / np.sqrt(DIM // HEADS), -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    ctx = (w @ v).transpose(0, 2, 1, 3).reshape(b, n, DIM)
    return ctx @ m.out_proj.weight.detach().numpy().T + m.out_proj.bias.detach().numpy()


@pytest.mark.parametrize("window,sinks", [(2, 1), (3, 0)])
def test_a_chunk_as_long_as_the_batch_is_masked_by_the_window(window, sinks):
    torch.manual_seed(0)
    m = MultiHeadAttention(DIM, HEADS).double().eval()
    b = n = 4  # the chunk length equals the batch size
    x = torch.randn(b, 2 * n, DIM, dtype=torch.float64)
    cache = WindowCache(window, sinks=sinks)
    outs, shapes = [], []
    with torch.no_grad():
        for chunk in (x[:, :n], x[:, n:]):
            kept = 0 if cache.keys is None else cache.keys.shape[2]
            mask = cache.chunk_mask(n)
            shapes.append((tuple(mask.shape), (1, 1, n, kept + n)))
            outs.append(m(chunk, mask=mask, cache=cache)[0])
    np.testing.assert_allclose(torch.cat(outs, 1).numpy(), _numpy_mha(m, x.numpy(), window, sinks), rtol=0, atol=1e-12)
    assert all(got == want for got, want in shapes), shapes
