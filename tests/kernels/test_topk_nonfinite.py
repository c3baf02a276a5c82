"""Top-k attention keeps NaN and inf at keys it may not attend out of every output and gradient.

Reference, written here: for each row the k best-scoring *real* keys of the clean input (float64),
a softmax over them, the weighted sum (NumPy), and the same formula in float64 torch for gradients.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.kernels import topk_attention

B, H, N, D = 2, 2, 6, 3


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3)]


def _pad():
    pad = torch.ones(B, N, dtype=torch.bool)
    pad[0, [1, 4]] = False  # 4 real keys
    pad[1, 2:] = False  # 2 real keys
    return pad


def _kept(q, k, pad, kk):
    """(B, H, N, N) bool: each row's kk best real keys (all of them when fewer), by NumPy scores."""
    s = np.where(pad[:, None, None, :], q @ np.swapaxes(k, -1, -2) / np.sqrt(D), -np.inf)
    kept = np.zeros(s.shape, dtype=bool)
    for idx in np.ndindex(*s.shape[:-1]):
        real = np.flatnonzero(np.isfinite(s[idx]))
        kept[idx][real[np.argsort(-s[idx][real], kind="stable")[:kk]]] = True
    return kept


def _numpy_topk(q, k, v, pad, kk):
    kept = _kept(q, k, pad, kk)
    s = np.where(kept, q @ np.swapaxes(k, -1, -2) / np.sqrt(D), -np.inf)
    m = np.where(kept.any(-1, keepdims=True), s.max(-1, keepdims=True), 0.0)
    e = np.where(kept, np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    return np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0) @ v


def _torch_topk(q, k, v, kept):
    s = (q @ k.transpose(-1, -2) / D**0.5).masked_fill(~kept, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v  # a row with no key: zeros


def _run(q, k, v, pad, kk):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = topk_attention(q, k, v, kk, mask=pad[:, None, :])
    g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    (out * g).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad, g


@pytest.mark.parametrize("kk", [3, 5, 6, 10])  # up to more than every row's number of real keys
def test_non_finite_padded_keys_and_values_reach_nothing_against_numpy(kk):
    q, k, v = _inputs()
    pad = _pad()
    dirty_k, dirty_v = k.clone(), v.clone()
    dirty_k.masked_fill_(~pad[:, None, :, None], float("nan"))
    dirty_v.masked_fill_(~pad[:, None, :, None], float("inf"))
    out, gq, gk, gv, g = _run(q, dirty_k, dirty_v, pad, kk)
    want = _numpy_topk(q.numpy(), k.numpy(), v.numpy(), pad.numpy(), kk)
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)
    q2, k2, v2 = (t.clone().requires_grad_() for t in (q, k, v))
    kept = torch.from_numpy(_kept(q.numpy(), k.numpy(), pad.numpy(), kk))
    (_torch_topk(q2, k2, v2, kept) * g).sum().backward()
    real = pad[:, None, :, None].expand_as(gk)
    for got, want_g, name in ((gq, q2.grad, "q"), (gk, k2.grad, "k"), (gv, v2.grad, "v")):
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got[real], want_g[real], rtol=0, atol=1e-12, msg=name)
    assert torch.equal(gk[~real], torch.zeros_like(gk[~real])) and torch.equal(gv[~real], torch.zeros_like(gv[~real]))


def test_a_fully_padded_sequence_gives_zeros_and_zero_gradients():
    q, k, v = _inputs(1)
    pad = _pad()
    pad[1] = False
    k[1], v[1] = float("nan"), float("-inf")
    out, gq, gk, gv, _ = _run(q, k, v, pad, 4)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    for grad in (gq, gk, gv):
        assert torch.equal(grad[1], torch.zeros_like(grad[1]))
        assert torch.isfinite(grad).all()
    want = _numpy_topk(q.numpy(), k.nan_to_num(0.0, 0.0, 0.0).numpy(), v.nan_to_num(0.0, 0.0, 0.0).numpy(), pad.numpy(), 4)
    np.testing.assert_allclose(out.numpy(), want, rtol=0, atol=1e-12)


def test_a_non_finite_key_a_row_may_attend_makes_that_row_nan_and_no_other():
    q, k, v = _inputs(2)
    pad = _pad()
    k[0, :, 3] = float("nan")  # a real key of sequence 0: every row of sequence 0 may attend it
    out, gq, gk, gv, _ = _run(q, k, v, pad, 2)
    assert torch.isnan(out[0]).all()
    want = _numpy_topk(q.numpy(), k.numpy(), v.numpy(), pad.numpy(), 2)
    np.testing.assert_allclose(out[1].numpy(), want[1], rtol=0, atol=1e-12)
    for grad in (gq, gk, gv):
        assert torch.isfinite(grad).all()
