"""Kernels: checks that a mutation run found missing (names, messages, the lse of one block).

References: float64 NumPy of softmax attention and its log-sum-exp ℓ_i = log Σ_j exp(s_ij), written here;
messages and names written by hand.
"""

import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import top_k
from attnlab.kernels.chunked_additive import chunked_additive_scores
from attnlab.kernels.lse import attention_lse


def np_attention_lse(q, k, v, allow, scale):
    s = scale * q @ k.T
    s = np.where(allow, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    out = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0) @ v
    lse = np.where(z[:, 0] > 0, np.log(np.where(z[:, 0] > 0, z[:, 0], 1.0)) + m[:, 0], -np.inf)
    return out, lse


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("masked", [False, True])
def test_attention_lse_against_numpy_with_and_without_a_mask_and_scale(scale, masked):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, generator=g) for _ in range(3))
    allow = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)
    out, lse = attention_lse(q, k, v, allow if masked else None, scale=scale)
    s = 1 / np.sqrt(3) if scale is None else scale
    want_out, want_lse = np_attention_lse(q.numpy(), k.numpy(), v.numpy(), allow.numpy() if masked else True, s)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-12)
    if masked:
        assert lse[1].item() == float("-inf") and bool((out[1] == 0).all())  # the fully masked row


def test_chunked_additive_scores_names_the_bad_argument():
    with pytest.raises(ValueError, match=re.escape("projected_query must have at least 2 dimensions; got shape (3)")):
        chunked_additive_scores(torch.randn(3), torch.randn(2, 3), torch.randn(3))
    with pytest.raises(ValueError, match=re.escape("v must have shape (3) (the additive score's vector v, (d_a,)); got (3, 1)")):
        chunked_additive_scores(torch.randn(2, 3), torch.randn(2, 3), torch.randn(3, 1))


def test_top_k_is_named_by_its_call():
    assert repr(top_k(3)) == "top_k(3)"
    assert repr(top_k(2, within=P.sliding_window(1))) == "top_k(2) within sliding_window(1, 1)"


def test_attention_lse_gives_finite_gradients_beside_a_fully_masked_row():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(3, 2, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    allow = torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1]], dtype=torch.bool)
    out, lse = attention_lse(q, k, v, allow)
    (out.sum() + torch.where(torch.isfinite(lse), lse, 0.0).sum()).backward()
    for t in (q, k, v):
        assert bool(torch.isfinite(t.grad).all())
    assert bool((q.grad[1] == 0).all())  # the row with no key takes no part
