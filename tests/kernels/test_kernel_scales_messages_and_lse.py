"""Kernels: the scale each kernel is given, argument names and messages, the lse of one block.

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

import np_reference as ref


@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("masked", [False, True])
def test_attention_lse_against_numpy_with_and_without_a_mask_and_scale(scale, masked):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, 3, dtype=torch.float64, generator=g) for _ in range(3))
    allow = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0]], dtype=torch.bool)
    out, lse = attention_lse(q, k, v, allow if masked else None, scale=scale)
    s = 1 / np.sqrt(3) if scale is None else scale
    want_out, want_lse = ref.attention_lse(q.numpy(), k.numpy(), v.numpy(), allow.numpy() if masked else True, s)
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


# --- an explicit scale reaches every kernel (each compared with dense float64 NumPy) ---------------

S = 0.37


def np_masked_attention(q, k, v, allow, scale):
    s = np.where(allow, scale * q @ np.swapaxes(k, -1, -2), -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.where(allow, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    z = e.sum(-1, keepdims=True)
    w = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0)
    return w @ v, w


def rand(*shape, seed=0):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_topk_attention_uses_the_given_scale():
    from attnlab.kernels import topk_attention

    q, k, v = rand(1, 1, 6, 3, seed=1), rand(1, 1, 6, 3, seed=2), rand(1, 1, 6, 2, seed=3)
    s = (q @ k.transpose(-1, -2)).numpy()
    keep = s >= np.sort(s, -1)[..., -2:-1]  # the two best keys of each row (no ties in random data)
    want, _ = np_masked_attention(q.numpy(), k.numpy(), v.numpy(), keep, S)
    np.testing.assert_allclose(topk_attention(q, k, v, 2, scale=S).numpy(), want, atol=1e-12)


def test_varlen_attention_uses_the_given_scale_with_weights():
    from attnlab.kernels import varlen_attention

    q, k, v = rand(5, 1, 3, seed=4), rand(5, 1, 3, seed=5), rand(5, 1, 2, seed=6)
    out, w = varlen_attention(q, k, v, [0, 3, 5], scale=S, need_weights=True)
    doc = np.array([0, 0, 0, 1, 1])
    allow = doc[:, None] == doc[None, :]
    want, want_w = np_masked_attention(q[:, 0].numpy(), k[:, 0].numpy(), v[:, 0].numpy(), allow, S)
    np.testing.assert_allclose(out[:, 0].numpy(), want, atol=1e-12)
    np.testing.assert_allclose(w[0].numpy(), want_w, atol=1e-12)


@pytest.mark.parametrize("need_weights", [False, True])
def test_neighborhood_attention_uses_the_given_scale(need_weights):
    from attnlab.kernels import neighborhood_attention_2d

    q, k, v = rand(1, 1, 3, 4, 2, seed=7), rand(1, 1, 3, 4, 2, seed=8), rand(1, 1, 3, 4, 2, seed=9)
    out, _ = neighborhood_attention_2d(q, k, v, kernel=3, scale=S, need_weights=need_weights)
    allow = P.neighborhood_2d(3, 4, 3).materialize(12).numpy()
    want, _ = np_masked_attention(*(t.reshape(12, 2).numpy() for t in (q, k, v)), allow, S)
    np.testing.assert_allclose(out.reshape(12, 2).numpy(), want, atol=1e-12)


def test_block_sparse_gradients_with_global_tokens_use_the_given_scale():
    from attnlab.kernels import block_sparse_attention

    pattern = P.sliding_window(1) | P.global_tokens([0])
    q, k, v = (rand(1, 1, 9, 3, seed=s).requires_grad_() for s in (10, 11, 12))
    out, _ = block_sparse_attention(q, k, v, pattern, block=4, scale=S)
    g = rand(1, 1, 9, 3, seed=13)
    (out * g).sum().backward()
    # the dense reference, differentiated by torch: softmax(S·qkᵀ masked) v
    allow = pattern.materialize(9)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    w = torch.softmax((S * q2 @ k2.transpose(-1, -2)).masked_fill(~allow, float("-inf")), -1)
    ((w @ v2) * g).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-10, rtol=0)


def test_kernel_argument_messages_name_the_argument():
    from attnlab.kernels import block_sparse_attention, neighborhood_attention_2d

    x = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match=re.escape("projected_keys must end in d_a=3 (the size of v); got shape (2, 4)")):
        chunked_additive_scores(torch.randn(2, 3), torch.randn(2, 4), torch.randn(3))
    with pytest.raises(ValueError, match="^query must be \\(b, h, H, W, d\\); got shape \\(1, 1, 4, 2\\)"):
        neighborhood_attention_2d(x, x, x, kernel=3)
    with pytest.raises(ValueError, match="^value "):
        block_sparse_attention(x, x, torch.randn(4, 2), P.full())
    # the smallest allowed k and block are accepted
    assert top_k(1).k == 1
    out, _ = block_sparse_attention(x, x, x, P.causal(), block=1)
    assert out.shape == (1, 1, 4, 2)


def test_chunked_additive_scores_of_empty_input_keep_the_leading_dims():
    a, b, v = torch.randn(2, 3, 0, 4), torch.randn(2, 3, 5, 4), torch.randn(4)
    assert chunked_additive_scores(a, b, v).shape == (2, 3, 0, 5)
    assert chunked_additive_scores(b, a, v).shape == (2, 3, 5, 0)
