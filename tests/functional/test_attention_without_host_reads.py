"""The path every device but an eager CPU takes (no look-ahead), checked on the CPU against NumPy.

``attnlab.functional.attention._host_checks`` is turned off, as on a GPU: causal chunks (q < k)
run through SDPA's bottom-right causal kernel, the non-finite rule through ``sanitize`` (``nan_to_num`` and a GEMV)
(whose backward is the identity). Values and gradients are compared with float64 NumPy written
here, and NaN/inf at masked positions must change nothing.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import attnlab

core = importlib.import_module("attnlab.functional.attention")


@pytest.fixture(params=["cpu look-ahead", "branch-free"])
def path(request, monkeypatch):
    if request.param == "branch-free":
        monkeypatch.setattr(core, "_host_checks", lambda t: False)
    return request.param


def _np_attention(q, k, v, allow):
    """float64 softmax(q kᵀ/√d where allowed) v; rows with no key give 0."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    s = np.where(allow, s, -np.inf)
    m = np.max(s, -1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allow, np.exp(s - m), 0.0)
    z = e.sum(-1, keepdims=True)
    return (e / np.where(z > 0, z, 1.0)) @ v


def _bottom_right(q_len, k_len):
    return np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)


def _inputs(q_len, k_len, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, n, 8, generator=g, dtype=torch.float64) for n in (q_len, k_len, k_len)]


@pytest.mark.parametrize("q_len,k_len", [(5, 5), (3, 7), (1, 9)])
def test_causal_chunks_match_numpy(path, q_len, k_len):
    q, k, v = _inputs(q_len, k_len)
    out, _ = attnlab.attention(q, k, v, causal=True)
    want = _np_attention(q.numpy(), k.numpy(), v.numpy(), _bottom_right(q_len, k_len))
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_a_nonfinite_future_key_of_a_chunk_reaches_no_earlier_row_nor_gradient(path, poison):
    q_len, k_len = 4, 9
    q, k, v = _inputs(q_len, k_len, seed=1)
    clean = [t.clone().requires_grad_() for t in (q, k, v)]
    dirty_k, dirty_v = k.clone(), v.clone()
    dirty_k[:, :, 7, 2] = poison  # visible to the last two queries only (query i sees keys <= i + 5)
    dirty_v[:, :, 7, 0] = poison
    dirty = [t.clone().requires_grad_() for t in (q, dirty_k, dirty_v)]
    outs = []
    for qq, kk, vv in (clean, dirty):
        out, _ = attnlab.attention(qq, kk, vv, causal=True)
        early = out[:, :, :2]
        early.sum().backward()
        outs.append(early)
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
    for a, b in zip(clean, dirty):
        keep = torch.ones_like(a.grad, dtype=torch.bool)
        if a.shape[2] == k_len:
            keep[:, :, 7] = False  # the poisoned key row itself
        torch.testing.assert_close(b.grad[keep], a.grad[keep], rtol=0, atol=0)
        assert torch.isfinite(b.grad).all()
    late, _ = attnlab.attention(*[t.detach() for t in dirty], causal=True)
    assert late[:, :, 2:].isnan().all()  # the rows that may attend it are NaN


def test_a_padding_mask_with_nan_padding_and_a_fully_masked_batch(path):
    q, k, v = (t.requires_grad_() for t in _inputs(6, 6, seed=2))
    real = torch.tensor([[True] * 4 + [False] * 2, [False] * 6])
    with torch.no_grad():
        k[0, :, 5] = float("nan")
        v[0, :, 4] = float("inf")
    out, _ = attnlab.attention(q, k, v, mask=real[:, None, None, :])
    want = _np_attention(q.detach().numpy(), np.nan_to_num(k.detach().numpy()), np.nan_to_num(v.detach().numpy()),
                         real.numpy()[:, None, None, :])
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(k.grad[0, :, 4:], torch.zeros_like(k.grad[0, :, 4:]))


@pytest.mark.parametrize("dtype", [torch.bool, torch.float64])
def test_a_one_dimensional_mask_applies_to_every_query(path, dtype):
    q, k, v = _inputs(4, 5, seed=3)
    allow = np.array([True, False, True, True, False])
    mask = torch.tensor(allow) if dtype == torch.bool else torch.tensor(np.where(allow, 0.0, -np.inf))
    fast, _ = attnlab.attention(q, k, v, mask=mask)
    slow, w = attnlab.attention(q, k, v, mask=mask, need_weights=True)
    want = _np_attention(q.numpy(), k.numpy(), v.numpy(), allow)
    np.testing.assert_allclose(fast.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(slow.numpy(), want, rtol=1e-10, atol=1e-12)
    assert torch.equal(w[..., ~torch.tensor(allow)], torch.zeros_like(w[..., ~torch.tensor(allow)]))


def test_sanitize_cleans_in_one_pass_and_passes_gradients_through():
    from attnlab.functional.nonfinite import sanitize

    x = torch.tensor([[1.0, float("nan")], [2.0, 3.0], [float("-inf"), 4.0]], requires_grad=True)
    y, bad = sanitize(x, torch.tensor([False, True, False]))
    assert y.tolist() == [[1.0, 0.0], [0.0, 0.0], [0.0, 4.0]]
    assert bad.tolist() == [True, False, True]
    y.backward(torch.full_like(y, 2.0))
    assert x.grad.tolist() == [[2.0, 2.0]] * 3


def test_the_compiled_device_path_equals_the_eager_one_with_nan_padding_and_gradients():
    """What CUDA runs (``_device_fast`` under ``torch.compile``), compiled here for the CPU: the same
    outputs and gradients as eager, with NaN in padded keys, inf in a padded value and a fully masked row."""
    q, k, v = _inputs(6, 6, seed=4)
    real = torch.tensor([[True] * 4 + [False] * 2, [False] * 6])[:, None, None, :]
    k[0, :, 5, 1], v[0, :, 4, 0] = float("nan"), float("inf")
    lead = torch.Size((2, 3))
    compiled = torch.compile(core._device_fast, dynamic=False)
    results = []
    for fn in (core._device_fast, compiled):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out = fn(qq, kk, vv, real, False, 8 ** -0.5, 0.0, lead, False)
        out.backward(torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape))
        results.append([out.detach(), qq.grad, kk.grad, vv.grad])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    want = _np_attention(q.numpy(), np.nan_to_num(k.numpy()), np.nan_to_num(v.numpy(), posinf=0.0), real.numpy())
    np.testing.assert_allclose(results[1][0].numpy(), want, rtol=1e-10, atol=1e-12)
    assert all(torch.isfinite(g).all() for g in results[1][1:])


@pytest.mark.parametrize("grad", [False, True])
def test_the_compiled_lean_path_of_a_padding_tensor_equals_numpy_with_an_empty_sequence(grad):
    """``_device_fast`` compiled for the CPU on a (b, 1, 1, k) bool tensor read as key padding: a NaN key
    at a padded position changes nothing, a sequence with no key (its query inf) is zero, whether
    its row is opened for the kernel (a gradient) or zeroed after it (none)."""
    q, k, v = _inputs(5, 5, seed=7)
    real = torch.tensor([[True] * 3 + [False] * 2, [False] * 5])[:, None, None, :]
    k[0, :, 4, 1], q[1, 0, 2, 0] = float("nan"), float("inf")
    rows, dead = core._raw_padding(real, torch.Size((2, 3, 5, 5)), q.dtype, False)
    compiled = torch.compile(core._device_fast, dynamic=False)
    qq, kk, vv = (t.clone().requires_grad_(grad) for t in (q, k, v))
    out = compiled(qq, kk, vv, real, False, 8 ** -0.5, 0.0, torch.Size((2, 3)), False, dead, rows)
    want = _np_attention(q.numpy(), np.nan_to_num(k.numpy()), v.numpy(), real.numpy())
    want[1] = 0.0
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    if grad:
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (qq, kk, vv))
        assert torch.all(kk.grad[0, :, 3:] == 0) and torch.all(qq.grad[1] == 0)


def test_a_nan_query_reaches_no_key_gradient_when_only_the_keys_need_one(path):
    """The query is cleaned whenever any gradient flows: a NaN query row (a padded position's
    garbage) must not reach dK or dV through the kernel's backward, even if q itself needs none."""
    q, k, v = _inputs(5, 5, seed=6)
    q[0, 1, 2, 3] = float("nan")
    k.requires_grad_(), v.requires_grad_()
    out, _ = attnlab.attention(q, k, v, causal=True)
    assert out[0, 1, 2].isnan().all()
    keep = ~torch.isnan(out)
    torch.where(keep, out, 0.0).sum().backward()
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()
    clean_q = q.clone()
    clean_q[0, 1, 2] = 0.0
    k2, v2 = k.detach().clone().requires_grad_(), v.detach().clone().requires_grad_()
    ref, _ = attnlab.attention(clean_q, k2, v2, causal=True)
    rows = torch.ones(5, dtype=torch.bool)
    rows[2] = False  # the NaN row passes no gradient
    (ref[0, 1, rows].sum() + ref[1].sum() + ref[0, 0].sum() + ref[0, 2].sum()).backward()
    torch.testing.assert_close(k.grad, k2.grad)
    torch.testing.assert_close(v.grad, v2.grad)
