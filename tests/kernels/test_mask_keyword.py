"""The kernels take a key mask as ``mask``: bool (b, n), True = may attend (a real key).

PyTorch's ``key_padding_mask`` (True = padding, the opposite) is not taken: a ``TypeError``.
Each function is checked against a
float64 NumPy reference written here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels.block_sparse import block_sparse_attention, weights_for_rows
from attnlab.kernels.topk import TopK, topk_attention, topk_indices

B, H, N, D, K = 2, 2, 6, 4, 3


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[1, 4:] = False  # the second sequence: its last two keys may not be attended
    return q, k, v, mask


def _allowed_causal(mask: np.ndarray) -> np.ndarray:
    """(b, 1, n, n): key j <= query i, and the key may be attended."""
    causal = np.tril(np.ones((N, N), dtype=bool))
    return causal[None, None] & mask[:, None, None, :]


def _allowed_topk(q: np.ndarray, k: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(b, h, n, n): each row's K highest-scoring keys among those that may be attended."""
    s = np.where(mask[:, None, None, :], q @ k.swapaxes(-1, -2), -np.inf)
    keep = np.zeros(s.shape, dtype=bool)
    for idx in np.ndindex(*s.shape[:-1]):
        keep[idx][np.argsort(-s[idx], kind="stable")[:K]] = True
    return keep & mask[:, None, None, :]


def _weights(q: np.ndarray, k: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    s = np.where(allowed, q @ k.swapaxes(-1, -2) / np.sqrt(D), -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _block_sparse(q, k, v, mask):
    return block_sparse_attention(q, k, v, P.causal(), block=4, mask=mask)[0]


def _rows(q, k, v, mask):
    return weights_for_rows(q, k, P.causal(), list(range(N)), mask=mask)


def _topk_attention(q, k, v, mask):
    return topk_attention(q, k, v, K, mask=mask)


def _topk_indices(q, k, v, mask):
    idx, kept = topk_indices(q, k, TopK(K), mask=mask)
    return torch.zeros(B, H, N, N, dtype=torch.bool).scatter(-1, idx, kept)


def _topk_mask(q, k, v, mask):
    return TopK(K).mask(q, k, mask=mask)


def _expected(name, q, k, v, mask):
    q, k, v, mask = q.numpy(), k.numpy(), v.numpy(), mask.numpy()
    if name in ("block_sparse_attention", "weights_for_rows"):
        w = _weights(q, k, _allowed_causal(mask))
        return w if name == "weights_for_rows" else w @ v
    keep = _allowed_topk(q, k, mask)
    return _weights(q, k, keep) @ v if name == "topk_attention" else keep


CALLS = {
    "block_sparse_attention": (_block_sparse, lambda q, k, v, **kw: block_sparse_attention(q, k, v, P.causal(), **kw)),
    "weights_for_rows": (_rows, lambda q, k, v, **kw: weights_for_rows(q, k, P.causal(), [0], **kw)),
    "topk_attention": (_topk_attention, lambda q, k, v, **kw: topk_attention(q, k, v, K, **kw)),
    "topk_indices": (_topk_indices, lambda q, k, v, **kw: topk_indices(q, k, TopK(K), **kw)),
    "TopK.mask": (_topk_mask, lambda q, k, v, **kw: TopK(K).mask(q, k, **kw)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_mask_true_may_attend_matches_float64(name):
    q, k, v, mask = _inputs()
    got = CALLS[name][0](q, k, v, mask)
    want = _expected(name, q, k, v, mask)
    if got.dtype == torch.bool:
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(CALLS))
def test_torchs_key_padding_mask_keyword_is_not_taken(name):
    q, k, v, mask = _inputs()
    with pytest.raises(TypeError) as err:
        CALLS[name][1](q, k, v, key_padding_mask=mask)
    assert "unexpected keyword argument 'key_padding_mask'" in str(err.value)
