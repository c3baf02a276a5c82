"""The decoder-side modules' shared call shape (``attnlab.nn._keyed``): every argument message in full,
the masks it lifts or passes on, ``precompute``'s padding mask, ``projected_keys``' shape, ``kv_finite``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab import Mask
from attnlab.nn import AdditiveAttention, LuongAttention
from attnlab.nn._keyed import check_projected, finish, mask_keys, prepare


def modules():
    torch.manual_seed(0)
    return [AdditiveAttention(3, 3, 4).double(), LuongAttention(3, 3, score="general").double()]


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize("m", modules(), ids=["additive", "luong"])
def test_shape_messages_in_full(m):
    q, k = t(2, 3), t(2, 4, 3)
    assert message(lambda: m(t(3), k)) == "query must have at least 2 dimensions; got shape (3)"
    assert message(lambda: m([[0.0] * 3] * 2, k)) == "query must be a torch.Tensor; got list"
    assert message(lambda: m(q, t(2, 3))) == "keys must have at least 3 dimensions; got shape (2, 3)"
    assert message(lambda: m(q, t(2, 4, 3, 1))) == "keys must be (b, k, d_k); got shape (2, 4, 3, 1)"
    assert message(lambda: m(t(2, 1, 1, 3), k)) == "query must be (b, d_q) or (b, q, d_q); got shape (2, 1, 1, 3)"
    assert message(lambda: m(t(3, 3), k)) == "query (3, 1, 3) and keys (2, 4, 3) have different batch sizes"
    assert message(lambda: m(q, k, t(2, 4))) == "values must have at least 3 dimensions; got shape (2, 4)"
    assert message(lambda: m(q, k, t(2, 5, 2))) == (
        "values must be (b, k, d_v) with the keys' b and k; keys (2, 4, 3), values (2, 5, 2)")
    assert message(lambda: m(q, k, t(1, 4, 2))) == (
        "values must be (b, k, d_v) with the keys' b and k; keys (2, 4, 3), values (1, 4, 2)")
    assert message(lambda: m(q, k, mask=[[True] * 4] * 2)) == "mask must be a torch.Tensor or an attnlab.Mask; got list"
    assert message(lambda: m(q, k, mask=Mask.padding([4, 3, 2], 4))) == (
        "the mask Mask(padding(lengths=[4, 3, 2])) is for b=3; the call has b=2 (b=2, q=1, k=4)")
    bad = torch.ones(2, 1, 5, dtype=torch.bool)
    assert message(lambda: m(q, k, mask=bad)).startswith("mask of shape (2, 1, 5) does not broadcast")


@pytest.mark.parametrize("m", modules(), ids=["additive", "luong"])
def test_masks_of_every_accepted_form_agree(m):
    """(b, k) and (b, q, k) bool masks, a (b, 1, k) one, and a float bias: the same weights."""
    q, k, v = t(2, 3, 3), t(2, 4, 3, seed=1), t(2, 4, 2, seed=2)
    ok = torch.tensor([[True, False, True, True], [True, True, True, False]])
    _, w = m(q, k, v, mask=ok, need_weights=True)
    assert torch.all(w[0, :, 1] == 0) and torch.all(w[1, :, 3] == 0)
    for other in (ok[:, None, :], ok[:, None, :].expand(2, 3, 4).contiguous(),
                  torch.zeros(2, 4, dtype=torch.float64).masked_fill(~ok, float("-inf")),
                  torch.zeros(2, 1, 4, dtype=torch.float64).masked_fill(~ok[:, None], float("-inf"))):
        torch.testing.assert_close(m(q, k, v, mask=other, need_weights=True)[1], w, atol=1e-15, rtol=0)
    _, w_one = m(q[:, 0], k, v, mask=ok, need_weights=True)  # one decoding step: (b, k) weights
    torch.testing.assert_close(w_one, w[:, 0], atol=1e-15, rtol=0)


@pytest.mark.parametrize("m", modules(), ids=["additive", "luong"])
@pytest.mark.parametrize("kv_finite", [False, True])
def test_a_padding_value_gives_the_numbers_of_the_bool_mask_it_replaces(m, kv_finite):
    """``Mask.padding`` (lengths or the (b, k) bool) as a decoder passes it: bit for bit the (b, k) tensor's
    context and weights, per step and with ``projected_keys``; a padded NaN key changes nothing."""
    q, k, v = t(2, 3, 3), t(2, 4, 3, seed=1), t(2, 4, 2, seed=2)
    ok = torch.tensor([[True, True, True, True], [True, True, False, False]])
    if not kv_finite:
        k[1, 3], v[1, 2] = float("nan"), float("inf")
    pk = m.precompute(k, ok)
    for mask in (Mask.padding([4, 2], 4), Mask.padding(ok)):
        for query in (q, q[:, 0]):
            for kw in ({}, {"projected_keys": pk}):
                ref = m(query, k, v, mask=ok, need_weights=True, kv_finite=kv_finite, **kw)
                out = m(query, k, v, mask=mask, need_weights=True, kv_finite=kv_finite, **kw)
                for a, b in zip(out, ref):
                    torch.testing.assert_close(a, b, rtol=0, atol=0)
                assert torch.isfinite(out[0]).all() and torch.all(out[1][1, ..., 2:] == 0)
        torch.testing.assert_close(m.precompute(k, mask), pk, rtol=0, atol=0)


def test_prepare_lifts_a_single_step_and_returns_what_it_was_given():
    q, k, v = t(2, 3), t(2, 4, 3), t(2, 4, 5)
    mask = torch.ones(2, 4, dtype=torch.bool)
    q2, v2, m2, single = prepare(q, k, v, mask)
    assert single is True and q2.shape == (2, 1, 3) and v2 is v and m2.shape == (2, 1, 4)
    q3, v3, m3, single3 = prepare(t(2, 3, 3), k, None, None)
    assert single3 is False and q3.shape == (2, 3, 3) and v3 is k and m3 is None
    full = torch.ones(2, 3, 4, dtype=torch.bool)
    assert prepare(t(2, 3, 3), k, None, full)[2] is full
    bias = torch.zeros(2, 3, 4, dtype=torch.float64)
    assert prepare(t(2, 3, 3), k, None, bias)[2] is bias  # a float mask passes unchanged


def test_mask_keys_zeroes_forbidden_rows_and_its_message():
    k = t(2, 3, 2)
    k[0, 1] = float("nan")
    ok = torch.tensor([[True, False, True], [False, True, True]])
    out = mask_keys(k, ok)
    ref = np.where(ok.numpy()[..., None], np.nan_to_num(k.numpy()), 0.0)
    np.testing.assert_array_equal(out.numpy(), ref)
    assert out.dtype == torch.float64
    assert mask_keys(k, None) is k
    np.testing.assert_array_equal(mask_keys(k, Mask.padding(ok)).numpy(), ref)  # the value's key padding
    for bad, got in ((ok.float(), "torch.float32 (2, 3)"), (ok[:, :2], "torch.bool (2, 2)"),
                     (ok[None], "torch.bool (1, 2, 3)"), ([[True] * 3] * 2, "list"),
                     (Mask.causal(), "Mask(causal(align='bottom-right'))")):
        assert message(lambda bad=bad: mask_keys(k, bad)) == (
            f"precompute's mask must be a bool (b, k) = (2, 3) padding mask (True = real key) "
            f"or Mask.padding(...); got {got}")


def test_check_projected_messages():
    k = t(2, 3, 5)
    check_projected(t(2, 3, 4), k, 4)  # fits: no error
    assert message(lambda: check_projected(t(2, 3), k, 4)) == "projected_keys must have at least 3 dimensions; got shape (2, 3)"
    for shape in ((2, 3, 5), (2, 2, 4), (1, 3, 4), (2, 3, 4, 1)):
        assert message(lambda shape=shape: check_projected(t(*shape), k, 4)) == (
            f"projected_keys must be (b, k, d) = (2, 3, 4) (precompute(keys) of these keys); "
            f"got ({', '.join(map(str, shape))})")


def test_finish_squeezes_only_a_single_step_and_drops_weights_on_request():
    q, k, v = t(2, 1, 3), t(2, 4, 3, seed=1), t(2, 4, 2, seed=2)
    score = lambda a, b: a @ b.transpose(-1, -2)  # noqa: E731
    e = (q @ k.transpose(-1, -2)).numpy()
    w_ref = np.exp(e - e.max(-1, keepdims=True))
    w_ref /= w_ref.sum(-1, keepdims=True)
    c, w = finish(q, k, v, score, None, True, True)
    assert c.shape == (2, 2) and w.shape == (2, 4)
    np.testing.assert_allclose(w.numpy(), w_ref[:, 0], atol=1e-14)
    np.testing.assert_allclose(c.numpy(), (w_ref @ v.numpy())[:, 0], atol=1e-14)
    c2, w2 = finish(q, k, v, score, None, False, False)
    assert c2.shape == (2, 1, 2) and w2 is None
    torch.testing.assert_close(c2[:, 0], c)


def test_finish_passes_kv_finite_to_the_core():
    """With ``kv_finite`` the core takes the caller's word and skips its pass over keys and values, so a
    NaN in a masked value reaches the output (0 · NaN); without it the core zeroes that row first."""
    q, k, v = t(1, 1, 3), t(1, 3, 3, seed=1), t(1, 3, 2, seed=2)
    v[0, 2] = float("nan")
    mask = torch.tensor([[[True, True, False]]])
    score = lambda a, b: a @ b.transpose(-1, -2)  # noqa: E731
    clean, _ = finish(q, k, v, score, mask, False, False)
    assert torch.isfinite(clean).all()
    trusted, _ = finish(q, k, v, score, mask, False, False, True)
    assert torch.isnan(trusted).all()


def test_mask_keys_keeps_the_keys_dtype():
    keys = torch.arange(6).view(1, 3, 2)
    out = mask_keys(keys, torch.tensor([[True, False, True]]))
    assert out.dtype == torch.int64 and out.tolist() == [[[0, 1], [0, 0], [4, 5]]]


@pytest.mark.parametrize("mask", [
    torch.ones(2, 1, 5, dtype=torch.bool),  # a key too many
    torch.ones(2, 2, 4, dtype=torch.bool),  # two query rows for one decoding step
    torch.ones(2, 1, 4, dtype=torch.int64),  # an integer mask of the right shape
])
def test_a_malformed_mask_is_named_before_the_modules_width_check(mask):
    """``prepare`` checks the whole call shape, the mask included, before the module checks its widths."""
    m = LuongAttention(3, 3, score="general")
    text = message(lambda: m(t(2, 2), t(2, 4, 3), mask=mask))  # the query is 2 wide, not 3: also wrong
    assert text.startswith("mask ") and "expected query" not in text
