"""attention(..., return_lse=True): the output and the row log-sum-exp from one score computation,
a PartialResult that merges exactly over disjoint key sets."""

import importlib

import numpy as np
import pytest
import torch

from attnlab.functional import attention
from attnlab.kernels import PartialResult, merge


def _ref(q, k, v, allow, scale):
    """float64 NumPy: (out, lse) over the allowed keys; a row with no key: out 0, lse −∞."""
    s = np.where(allow, q @ k.swapaxes(-1, -2) * scale, -np.inf)
    top = s.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    tot = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(tot > 0, (e / np.where(tot > 0, tot, 1.0)) @ v, 0.0)
        lse = np.where(tot[..., 0] > 0, np.log(np.where(tot > 0, tot, 1.0))[..., 0] + top[..., 0], -np.inf)
    return out, lse


def _qkv(seed=0, b=2, h=3, nq=5, nk=7, d=4, dv=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, nq, d, generator=g, dtype=torch.float64),
            torch.randn(b, h, nk, d, generator=g, dtype=torch.float64),
            torch.randn(b, h, nk, dv, generator=g, dtype=torch.float64))


def _mask(nq=5, nk=7, seed=1):
    allow = torch.rand(nq, nk, generator=torch.Generator().manual_seed(seed)) > 0.4
    allow[2] = False  # a row with no key
    allow[0, 0] = True
    return allow


@pytest.mark.parametrize("masked", [False, True])
def test_output_and_lse_match_float64_numpy(masked):
    q, k, v = _qkv()
    allow = _mask()
    out, lse = attention(q, k, v, mask=allow if masked else None, return_lse=True)
    want_out, want_lse = _ref(q.numpy(), k.numpy(), v.numpy(), allow.numpy() if masked else True, 0.5)
    assert lse.shape == (2, 3, 5)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-12)
    if masked:
        assert torch.isneginf(lse[..., 2]).all() and (out[..., 2, :] == 0).all()


def test_a_float_bias_is_inside_the_lse():
    q, k, v = _qkv(nq=2, nk=3)
    bias = torch.tensor([[0.0, -1.0, 2.0], [0.5, 0.0, -np.inf]], dtype=torch.float64)
    _, lse = attention(q, k, v, mask=bias, return_lse=True)
    s = q.numpy() @ k.numpy().swapaxes(-1, -2) * 0.5 + bias.numpy()
    np.testing.assert_allclose(lse.numpy(), np.log(np.exp(s).sum(-1)), atol=1e-12)


def test_merge_of_two_halves_over_split_keys_equals_the_whole_call():
    q, k, v = _qkv(seed=3, nk=9)
    allow = _mask(nk=9, seed=4)
    allow[4, :5] = False  # a row with no key in the first half only
    halves = [attention(q, k[:, :, s], v[:, :, s], mask=allow[:, s], return_lse=True)
              for s in (slice(0, 5), slice(5, 9))]
    out, lse = merge([PartialResult(*h) for h in halves])
    want_out, want_lse = _ref(q.numpy(), k.numpy(), v.numpy(), allow.numpy(), 0.5)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-12)
    whole_out, whole_lse = attention(q, k, v, mask=allow, return_lse=True)
    torch.testing.assert_close(out, whole_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(lse, whole_lse, atol=1e-12, rtol=0)


def test_the_scores_are_computed_once():
    q, k, v = _qkv(nq=2, nk=3)
    calls = []

    def score(a, b):
        calls.append(1)
        return a @ b.transpose(-1, -2)

    out, lse = attention(q, k, v, score=score, return_lse=True)
    assert len(calls) == 1
    want_out, want_lse = _ref(q.numpy(), k.numpy(), v.numpy(), True, 1.0)
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)


def test_gradients_of_out_and_lse_are_finite_beside_a_row_with_no_key():
    q, k, v = (t.requires_grad_() for t in _qkv())
    out, lse = attention(q, k, v, mask=_mask(), return_lse=True)
    (out.sum() + lse.masked_fill(torch.isneginf(lse), 0.0).sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[..., 2, :] == 0).all()  # the row with no key passes no gradient
    # d lse_i / d q_i = scale · Σ_j α_ij k_j (plus the output's share): check the lse part alone
    q2 = q.detach().clone().requires_grad_()
    _, lse2 = attention(q2, k.detach(), v.detach(), mask=_mask(), return_lse=True)
    lse2.masked_fill(torch.isneginf(lse2), 0.0).sum().backward()
    allow = _mask().numpy()
    s = np.where(allow, q.detach().numpy() @ k.detach().numpy().swapaxes(-1, -2) * 0.5, -np.inf)
    with np.errstate(invalid="ignore"):
        w = np.nan_to_num(np.exp(s - s.max(-1, keepdims=True)))
        w = np.nan_to_num(w / w.sum(-1, keepdims=True))
    np.testing.assert_allclose(q2.grad.numpy(), 0.5 * w @ k.detach().numpy(), atol=1e-12)


def test_masked_non_finite_keys_never_reach_the_lse_and_allowed_ones_make_it_nan():
    q, k, v = _qkv(nq=3, nk=4)
    allow = torch.tensor([[True, True, False, False], [True, False, True, False], [False, False, False, False]])
    k2, v2 = k.clone(), v.clone()
    k2[..., 3, 0], v2[..., 3, 1] = np.nan, np.inf  # key 3: masked for every row
    k2[..., 2, 0] = np.nan  # key 2: allowed for row 1 only
    out, lse = attention(q, k2, v2, mask=allow, return_lse=True)
    want_out, want_lse = _ref(q.numpy(), k.numpy(), v.numpy(), allow.numpy(), 0.5)
    np.testing.assert_allclose(lse[..., 0].numpy(), want_lse[..., 0], atol=1e-12)
    np.testing.assert_allclose(out[..., 0, :].numpy(), want_out[..., 0, :], atol=1e-12)
    assert torch.isnan(lse[..., 1]).all() and torch.isnan(out[..., 1, :]).all()
    assert torch.isneginf(lse[..., 2]).all() and (out[..., 2, :] == 0).all()


def test_need_weights_with_return_lse_is_refused():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="need_weights and return_lse"):
        attention(q, k, v, need_weights=True, return_lse=True)


@pytest.mark.parametrize("host", [True, False])
def test_causal_with_fewer_queries_than_keys_is_bottom_right_in_the_lse(monkeypatch, host):
    core = importlib.import_module("attnlab.functional.attention")  # the module (the package exports the function)

    monkeypatch.setattr(core, "_host_checks", lambda t: host)  # False: the path without host reads
    q, k, v = _qkv(nq=3, nk=6)
    k[..., 5, 0] = np.nan  # seen by the last query only
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    allow = np.tril(np.ones((3, 6), dtype=bool), k=3)  # query i sees keys j <= i + 3
    want_out, want_lse = _ref(q.numpy(), k.numpy(), v.numpy(), allow, 0.5)
    np.testing.assert_allclose(lse[..., :2].numpy(), want_lse[..., :2], atol=1e-12)
    np.testing.assert_allclose(out[..., :2, :].numpy(), want_out[..., :2, :], atol=1e-12)
    assert torch.isnan(lse[..., 2]).all() and torch.isnan(out[..., 2, :]).all()


def test_half_precision_lse_is_the_float32_lse_rounded():
    q, k, v = (t.float() for t in _qkv())
    allow = _mask()
    _, lse32 = attention(q, k, v, mask=allow, return_lse=True)
    out16, lse16 = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask=allow, return_lse=True)
    assert lse16.dtype == torch.bfloat16 and out16.dtype == torch.bfloat16
    torch.testing.assert_close(lse16.float(), lse32, atol=0.05, rtol=0.01)
    assert torch.isneginf(lse16[..., 2]).all()
