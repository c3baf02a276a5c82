"""A pattern and a full bool mask in one call: ``block_sparse_attention(q, k, v, pattern, mask=M)``
attends the pairs the pattern allows AND M allows, against float64 NumPy written here."""

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention, weights_for_rows
from attnlab.nn import MultiHeadAttention
from attnlab.nn.backends import BlockSparse


def window_np(n, before, after):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return (j >= i - before) & (j <= i + after)


def causal_window_np(n, before):
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    return window_np(n, before, before) & (j <= i)


def global_window_np(n, before, glob):
    allow = window_np(n, before, before)
    allow[glob, :] = True
    allow[:, glob] = True
    return allow


PATTERNS = {
    "window": (lambda: P.sliding_window(3), lambda n: window_np(n, 3, 3)),
    "causal window": (lambda: P.sliding_window(4) & P.causal(), lambda n: causal_window_np(n, 4)),
    "global+window": (lambda: P.sliding_window(2) | P.global_tokens([0, 9]), lambda n: global_window_np(n, 2, [0, 9])),
}


def reference_np(q, k, v, allow, scale):
    """float64 softmax over the allowed keys; rows with none give zeros. allow (b, h, n, n) bool."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    s = np.where(allow, s, -np.inf)
    top = np.max(s, -1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(allow, np.exp(s - top), 0.0)
    tot = e.sum(-1, keepdims=True)
    w = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 0.0)
    return np.einsum("bhij,bhjd->bhid", w, v)


def reference_torch(q, k, v, allow, scale):
    """The same reference in float64 torch, for gradients by autograd."""
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~allow, -torch.inf)
    dead = ~allow.any(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v


def inputs(b=2, h=2, n=21, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(3)]


def random_mask(shape, seed, p=0.6):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) < p


def run(q, k, v, pattern, M, block=4):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, w = block_sparse_attention(q, k, v, pattern, mask=M, block=block)
    assert w is None
    dout = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return out.detach(), grads, dout


def check(q, k, v, name, M, block=4):
    make, allow_np = PATTERNS[name]
    b, h, n, d = q.shape
    allow = torch.from_numpy(allow_np(n)) & M.expand(b, h, n, n)
    out, grads, dout = run(q, k, v, make(), M, block)
    want = reference_np(q.numpy(), k.numpy(), v.numpy(), allow.numpy(), d ** -0.5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    want_grads = torch.autograd.grad(reference_torch(qr, kr, vr, allow, d ** -0.5), (qr, kr, vr), dout)
    for got, exp in zip(grads, want_grads):
        np.testing.assert_allclose(got.numpy(), exp.numpy(), rtol=1e-9, atol=1e-12)
    return out, grads


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("shape", [(2, 2, 21, 21), (2, 1, 21, 21), (1, 1, 21, 21), (2, 21, 21)])
def test_pattern_and_random_mask_match_numpy(name, shape):
    q, k, v = inputs()
    M = random_mask(shape, seed=1)  # a 3-D mask broadcasts from the right: (h, n, n) here
    check(q, k, v, name, M)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_fully_masked_rows_give_zero_output_and_zero_gradient(name):
    q, k, v = inputs()
    M = random_mask((2, 1, 21, 21), seed=2)
    M[0, :, 5] = False  # row 5 of batch 0: nothing allowed
    M[1, :, 11:17] = False
    out, (dq, _, _) = check(q, k, v, name, M)
    assert torch.all(out[0, :, 5] == 0) and torch.all(out[1, :, 11:17] == 0)
    assert torch.all(dq[0, :, 5] == 0) and torch.all(dq[1, :, 11:17] == 0)


@pytest.mark.parametrize("name", list(PATTERNS))
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_where_the_mask_forbids_reaches_nothing(name, bad):
    q, k, v = inputs()
    M = random_mask((2, 1, 21, 21), seed=3)
    M[..., 7] = False  # no query may attend key 7
    M[1, :, :, 13] = False
    clean = run(q, k, v, PATTERNS[name][0](), M)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 7, 1], v2[:, 0, 7, 2], k2[1, :, 13, 0], v2[1, 1, 13, 4] = bad, bad, bad, bad
    dirty = run(q, k2, v2, PATTERNS[name][0](), M)
    assert torch.isfinite(dirty[0]).all() and all(torch.isfinite(g).all() for g in dirty[1])
    torch.testing.assert_close(dirty[0], clean[0], rtol=0, atol=0)
    for got, exp in zip(dirty[1], clean[1]):
        torch.testing.assert_close(got, exp, rtol=0, atol=0)


def test_nonfinite_key_an_allowed_row_attends_makes_that_row_nan():
    q, k, v = inputs(b=1, h=1)
    M = torch.ones(1, 1, 21, 21, dtype=torch.bool)
    M[0, 0, :10, 7] = False  # rows 0..9 may not attend key 7; rows 4..10 of the window could
    k = k.clone()
    k[0, 0, 7, 0] = float("nan")
    out, _ = block_sparse_attention(q, k, v, P.sliding_window(3), mask=M, block=4)
    nan_rows = torch.isnan(out[0, 0]).any(-1)
    assert nan_rows.tolist() == [i == 10 for i in range(21)]


def test_through_multihead_attention_with_a_b1nn_mask():
    torch.manual_seed(0)
    b, n, dim, h = 2, 13, 8, 2
    m = MultiHeadAttention(dim, h, backend=BlockSparse(P.sliding_window(2), block=4)).double()
    dense = MultiHeadAttention(dim, h).double()
    dense.load_state_dict(m.state_dict())
    x = torch.randn(b, n, dim, dtype=torch.float64)
    M = random_mask((b, 1, n, n), seed=4)
    M[1, 0, 3] = False  # a row with no key
    out, w = m(x, mask=M, need_weights=True)
    want, want_w = dense(x, mask=M & torch.from_numpy(window_np(n, 2, 2)), need_weights=True)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(w, want_w, rtol=1e-10, atol=1e-12)


def test_weights_for_rows_with_a_full_mask():
    q, k, _ = inputs(b=1, h=2)
    M = random_mask((1, 2, 21, 21), seed=5)
    w = weights_for_rows(q, k, P.sliding_window(3), [0, 6, 20], mask=M)
    allow = torch.from_numpy(window_np(21, 3, 3)) & M
    s = np.einsum("bhid,bhjd->bhij", q.numpy(), k.numpy()) * 5 ** -0.5
    s = np.where(allow.numpy(), s, -np.inf)
    e = np.where(allow.numpy(), np.exp(s - np.max(s, -1, keepdims=True)), 0.0)
    np.testing.assert_allclose(w.numpy(), (e / e.sum(-1, keepdims=True))[:, :, [0, 6, 20]], rtol=1e-10)


def test_bad_full_masks_are_refused():
    q, k, v = inputs(b=1, h=1, n=6)
    with pytest.raises(ValueError, match=r"broadcastable to \(b, h, n, n\) = \(1, 1, 6, 6\); got shape \(1, 1, 5, 6\)"):
        block_sparse_attention(q, k, v, P.sliding_window(1), mask=torch.ones(1, 1, 5, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"must be bool \(True = may attend\).*got dtype torch.float32"):
        block_sparse_attention(q, k, v, P.sliding_window(1), mask=torch.zeros(1, 1, 6, 6))
    with pytest.raises(ValueError, match="need_weights=True takes a key mask"):
        block_sparse_attention(q, k, v, P.sliding_window(1), mask=torch.ones(1, 1, 6, 6, dtype=torch.bool),
                               need_weights=True)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_dense_path_of_other_devices_matches_numpy(name, monkeypatch):
    from attnlab.kernels import block_sparse as bs

    monkeypatch.setattr(bs.devices, "backend_for", lambda device: "dense")  # the path devices other than CPU, CUDA take
    q, k, v = inputs()
    M = random_mask((2, 1, 21, 21), seed=6)
    M[0, :, 5] = False
    M[..., 8] = False
    out, grads = check(q, k, v, name, M)
    k = k.clone()
    k[:, :, 8, 0] = float("nan")  # where M forbids: reaches nothing
    dirty, dirty_grads, _ = run(q, k, v, PATTERNS[name][0](), M)
    torch.testing.assert_close(dirty, out, rtol=0, atol=0)
    for got, exp in zip(dirty_grads, grads):
        torch.testing.assert_close(got, exp, rtol=0, atol=0)
