"""The scorecard's wrappers (attnlab.testing.scorecard) compute the attention their row names, each in
the mask convention of its signature: compared with softmax attention written here in float64 NumPy."""

from __future__ import annotations

import numpy as np
import torch

from attnlab.testing import scorecard


def softmax_attention(q, k, v, allow):
    """float64 NumPy: softmax over the allowed keys of q·k / √d, times v; allow (b, h, q, k), True = may attend."""
    q, k, v = (t.detach().double().numpy() for t in (q, k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    s = np.where(allow, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", w / w.sum(-1, keepdims=True), v)


def _out(result) -> np.ndarray:
    """The output, as check reads it: the first element of a tuple."""
    out = result[0] if isinstance(result, (tuple, list)) else result
    return out.detach().double().numpy()


def _qkv(b, h, n, m, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, length, d, generator=g) for length in (n, m, m))


def test_multihead_is_masked_attention_with_true_meaning_masked_out():
    b, h, n, m, d = 2, 2, 3, 4, 2
    q, k, v = _qkv(b, h, n, m, d)
    forbid = torch.zeros(b, h, n, m, dtype=torch.bool)  # True = masked out (nn.MultiheadAttention's polarity)
    forbid[0, 0, 0, 1] = forbid[0, 1, 2, 0] = forbid[1, 0, 1, 3] = forbid[1, 1, :, 2] = True
    out = scorecard.multihead(q, k, v, forbid)
    assert out.shape == (b, h, n, d)
    np.testing.assert_allclose(_out(out), softmax_attention(q, k, v, ~forbid.numpy()), rtol=1e-5, atol=1e-6)


def test_attnlab_causal_row_is_bottom_right_aligned_causal_attention():
    b, h, n, m, d = 1, 2, 2, 4, 3
    q, k, v = _qkv(b, h, n, m, d, seed=1)
    allow = np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n)  # the last query sees every key
    np.testing.assert_allclose(_out(scorecard.attnlab_causal(q, k, v, True)),
                               softmax_attention(q, k, v, np.broadcast_to(allow, (b, h, n, m))), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_out(scorecard.attnlab_causal(q, k, v, False)),
                               softmax_attention(q, k, v, np.ones((b, h, n, m), dtype=bool)), rtol=1e-5, atol=1e-6)
