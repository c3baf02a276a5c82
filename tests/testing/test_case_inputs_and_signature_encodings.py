"""What each case of attnlab.testing.check builds (shapes, float64, which keys are masked, where NaN/inf
are planted, the draws from its generator in order) and how each signature lays the mask out for the
function under test (polarity, causal alignment, additive -inf, (b, k) padding, is_causal) with its
refusals. Expected tensors are rebuilt here from torch's generator by the recipe each case documents,
or written out."""

from __future__ import annotations

import pytest
import torch

from attnlab.testing import cases as C
from attnlab.testing.signatures import SIGNATURES, NotExpressible, signature

F64 = torch.float64


def _gen(seed=7):
    return torch.Generator().manual_seed(seed)


def _draw(g, b, h, n, m, d):
    return [torch.randn(b, h, length, d, generator=g, dtype=F64) for length in (n, m, m)]


def _same_qkv(s, want):
    for got, exp in zip((s.q, s.k, s.v), want):
        assert got.dtype == F64
        assert got.shape == exp.shape
        assert torch.equal(got.nan_to_num(5.0, 6.0), exp.nan_to_num(5.0, 6.0))


def test_the_ladder_and_the_list_of_cases():
    assert C.LADDER == [
        (1, 1, 1, 2, 1),
        (1, 1, 2, 2, 2),
        (1, 1, 2, 3, 2),
        (2, 1, 3, 3, 2),
        (2, 2, 4, 5, 3),
        (2, 2, 9, 17, 8),
        (2, 2, 130, 257, 128),
    ]
    assert [(c.name, c.ladder, c.twice) for c in C.CASES] == [
        ("values", True, False),
        ("deterministic", True, True),
        ("broadcast mask (q, k)", True, False),
        ("non-contiguous inputs", True, False),
        ("masked NaN value", True, False),
        ("masked inf key", True, False),
        ("fully masked row", True, False),
        ("mask polarity", True, False),
        ("causal", True, False),
        ("causal alignment (q < k)", True, False),
        ("causal alignment (q > k)", True, False),
        ("local window", True, False),
        ("random row masks", True, False),
        ("empty keys (k = 0)", False, False),
        ("empty batch (b = 0)", False, False),
        ("empty queries (q = 0)", False, False),
    ]
    assert C.Case("x", C.values).ladder is True and C.Case("x", C.values).twice is False


def test_values_dense_draws_q_k_v_then_a_dense_mask_with_the_diagonal_allowed():
    s = C.values((2, 2, 4, 5, 3), _gen(), True)
    g = _gen()
    want = _draw(g, 2, 2, 4, 5, 3)
    allow = torch.rand(2, 2, 4, 5, generator=g) < 0.7
    assert not allow.all()  # this seed masks some pairs
    allow[..., [0, 1, 2, 3], [0, 1, 2, 3]] = True
    _same_qkv(s, want)
    assert s.allow.dtype == torch.bool and torch.equal(s.allow, allow)
    assert (s.causal, s.strided) == (False, False)


def test_values_dense_wraps_the_diagonal_when_there_are_fewer_keys_than_queries():
    s = C.values((1, 1, 3, 2, 1), _gen(3), True)
    g = _gen(3)
    _draw(g, 1, 1, 3, 2, 1)
    allow = torch.rand(1, 1, 3, 2, generator=g) < 0.7
    allow[..., [0, 1, 2], [0, 1, 0]] = True
    assert torch.equal(s.allow, allow)


def test_values_sparse_draws_a_key_mask_with_the_first_key_allowed():
    masked = []
    for seed in range(4):
        s = C.values((2, 2, 3, 6, 2), _gen(seed), False)
        g = _gen(seed)
        _same_qkv(s, _draw(g, 2, 2, 3, 6, 2))
        allow = torch.rand(2, 1, 1, 6, generator=g) < 0.7
        allow[..., 0] = True
        assert torch.equal(s.allow, allow)
        masked.append(not s.allow.all())
    assert any(masked)


def test_broadcast_mask_is_one_q_by_k_mask_drawn_after_the_case_values():
    for dense in (True, False):
        s = C.broadcast_mask((2, 1, 3, 4, 2), _gen(), dense)
        g = _gen()
        want = _draw(g, 2, 1, 3, 4, 2)
        torch.rand((2, 1, 3, 4) if dense else (2, 1, 1, 4), generator=g)
        allow = torch.rand(3, 4, generator=g) < 0.7
        allow[[0, 1, 2], [0, 1, 2]] = True
        _same_qkv(s, want)
        assert torch.equal(s.allow, allow)


def test_non_contiguous_is_the_values_case_marked_strided():
    s = C.non_contiguous((1, 2, 2, 3, 2), _gen(), True)
    ref = C.values((1, 2, 2, 3, 2), _gen(), True)
    assert s.strided is True
    _same_qkv(s, (ref.q, ref.k, ref.v))
    assert torch.equal(s.allow, ref.allow)


def test_masked_nan_value_masks_the_odd_keys_and_plants_nan_in_their_values():
    for dense in (True, False):
        s = C.masked_nan_value((2, 2, 3, 5, 2), _gen(), dense)
        g = _gen()
        q, k, v = _draw(g, 2, 2, 3, 5, 2)
        v[:, :, [1, 3], :] = torch.nan
        _same_qkv(s, (q, k, v))
        keep = torch.tensor([True, False, True, False, True])
        assert s.allow.shape == (2, 1, 1, 5) and torch.equal(s.allow, keep.expand(2, 1, 1, 5))
        assert torch.isnan(s.v[:, :, [1, 3]]).all() and torch.isfinite(s.v[:, :, [0, 2, 4]]).all()


def test_masked_inf_key_redraws_the_values_and_plants_inf_in_the_odd_keys():
    for dense in (True, False):
        s = C.masked_inf_key((1, 2, 2, 4, 3), _gen(), dense)
        g = _gen()
        q, k, _ = _draw(g, 1, 2, 2, 4, 3)
        torch.rand(1, 1, 1, 4, generator=g)  # the sparse mask of "values", always
        v = torch.randn(1, 2, 4, 3, generator=g, dtype=F64)
        k[:, :, [1, 3], :] = torch.inf
        _same_qkv(s, (q, k, v))
        assert torch.equal(s.allow, torch.tensor([True, False, True, False]).expand(1, 1, 1, 4))
        assert (s.k[:, :, [1, 3]] == torch.inf).all() and torch.isfinite(s.v).all()


def test_fully_masked_row_masks_every_key_of_the_first_batch_element_only():
    s = C.fully_masked_row((3, 2, 2, 4, 2), _gen(), True)
    assert s.allow.shape == (3, 1, 1, 4) and s.allow.dtype == torch.bool
    assert not s.allow[0].any() and s.allow[1:].all()
    g = _gen()
    _same_qkv(s, _draw(g, 3, 2, 2, 4, 2))


def test_mask_polarity_forbids_the_first_key_only():
    s = C.mask_polarity((2, 2, 2, 3, 2), _gen(), True)
    assert s.allow.shape == (2, 1, 1, 3)
    assert torch.equal(s.allow, torch.tensor([False, True, True]).expand(2, 1, 1, 3))
    _same_qkv(s, _draw(_gen(), 2, 2, 2, 3, 2))  # drawn from the case's generator


@pytest.mark.parametrize(("n", "length"), [(1, 2), (2, 2), (4, 4)])
def test_causal_is_square_at_least_two_long_with_nan_in_the_last_key_and_value(n, length):
    s = C.causal((2, 1, n, 5, 3), _gen(), True)
    g = _gen()
    q, k, v = _draw(g, 2, 1, length, length, 3)
    k[..., -1, :] = torch.nan
    v[..., -1, :] = torch.nan
    _same_qkv(s, (q, k, v))
    assert torch.isfinite(s.k[..., :-1, :]).all() and torch.isfinite(s.v[..., :-1, :]).all()
    assert s.allow is None and s.causal is True and s.strided is False


@pytest.mark.parametrize(("m", "n", "length"), [(1, 1, 2), (2, 1, 2), (3, 2, 3), (5, 4, 5)])
def test_causal_alignment_has_one_query_fewer_than_keys(m, n, length):
    s = C.causal_alignment((1, 2, 9, m, 2), _gen(), False)
    g = _gen()
    _same_qkv(s, _draw(g, 1, 2, n, length, 2))
    assert s.allow is None and s.causal is True
    assert torch.isfinite(s.k).all()


@pytest.mark.parametrize(
    ("name", "b", "n", "m"),
    [
        ("empty keys (k = 0)", 2, 3, 0),
        ("empty batch (b = 0)", 0, 3, 4),
        ("empty queries (q = 0)", 2, 0, 4),
    ],
)
def test_the_empty_cases_have_two_heads_three_features_and_an_all_true_key_mask(name, b, n, m):
    (case,) = [c for c in C.CASES if c.name == name]
    s = case.build((1, 1, 1, 2, 1), _gen(), True)  # the shape given is ignored
    _check_empty(s, b, n, m)
    built = C._empty(b, n, m)((2, 2, 4, 5, 3), _gen(), False)  # built now, not at import
    _check_empty(built, b, n, m)
    _same_qkv(built, _draw(_gen(), b, 2, n, m, 3))


def _check_empty(s, b, n, m):
    assert s.q.shape == (b, 2, n, 3) and s.k.shape == (b, 2, m, 3) and s.v.shape == (b, 2, m, 3)
    assert s.q.dtype == s.k.dtype == s.v.dtype == F64
    assert s.allow.shape == (b, 1, 1, m) and s.allow.dtype == torch.bool and s.allow.all()
    assert s.causal is False and s.strided is False


def test_the_signatures_their_argument_names_and_flags():
    got = {n: (s.name, s.argument, s.comment, s.float_mask, s.pairs) for n, s in SIGNATURES.items()}
    assert got == {
        "qkv_mask": ("qkv_mask", "mask", "bool, True = may attend", False, True),
        "qkv_torch_mask": (
            "qkv_torch_mask",
            "mask",
            "bool, True = masked out (nn.MultiheadAttention's polarity)",
            False,
            True,
        ),
        "qkv_bias": ("qkv_bias", "bias", "additive float mask, -inf forbids", True, True),
        "qkv_padding": (
            "qkv_padding",
            "key_padding",
            "(b, k) bool, True = a real key",
            False,
            False,
        ),
        "qkv_causal": ("qkv_causal", "is_causal", "True = causal (key <= query)", False, False),
    }
    assert signature("qkv_bias") is SIGNATURES["qkv_bias"]
    with pytest.raises(ValueError) as err:
        signature("mask")
    assert str(err.value) == (
        "signature='mask' is not one of ['qkv_bias', 'qkv_causal', 'qkv_mask', "
        "'qkv_padding', 'qkv_torch_mask']"
    )


T, F_ = True, False


def test_a_pair_mask_with_no_mask_is_all_true_and_causal_folds_in_its_alignment():
    enc = SIGNATURES["qkv_mask"].encode
    none = enc(None, False, (2, 3, 2, 3), torch.float32, "cpu")
    assert none.dtype == torch.bool and none.shape == (1, 1, 2, 3) and none.all()
    assert torch.equal(
        enc(None, "top_left", (1, 1, 2, 3), torch.float32, "cpu"),
        torch.tensor([[T, F_, F_], [T, T, F_]]),
    )
    assert torch.equal(
        enc(None, "bottom_right", (1, 1, 2, 3), torch.float32, "cpu"),
        torch.tensor([[T, T, F_], [T, T, T]]),
    )
    keys = torch.tensor([[T, F_, T], [T, T, F_]]).reshape(2, 1, 1, 3)
    got = enc(keys, "bottom_right", (2, 1, 2, 3), torch.float32, "cpu")
    assert torch.equal(got, torch.tensor([[[[T, F_, F_], [T, F_, T]]], [[[T, T, F_], [T, T, F_]]]]))
    assert enc(keys, False, (2, 1, 2, 3), torch.float32, "cpu") is not None
    assert torch.equal(
        enc(keys, False, (2, 1, 2, 3), torch.float32, "cpu"), keys
    )  # broadcast stays broadcast


def test_torch_polarity_inverts_and_bias_is_zero_or_minus_inf_in_the_dtype():
    allow = torch.tensor([[T, F_, T], [F_, T, T]])
    assert torch.equal(
        SIGNATURES["qkv_torch_mask"].encode(allow, False, (1, 1, 2, 3), torch.float32, "cpu"),
        ~allow,
    )
    assert torch.equal(
        SIGNATURES["qkv_torch_mask"].encode(None, "top_left", (1, 1, 2, 2), torch.float32, "cpu"),
        torch.tensor([[F_, T], [F_, F_]]),
    )
    for dtype in (torch.float16, torch.float64):
        bias = SIGNATURES["qkv_bias"].encode(allow, False, (1, 1, 2, 3), dtype, "cpu")
        assert bias.dtype == dtype
        inf = float("-inf")
        assert bias.tolist() == [[0.0, inf, 0.0], [inf, 0.0, 0.0]]
    assert (
        SIGNATURES["qkv_mask"].encode(allow, False, (1, 1, 2, 3), torch.float64, "cpu").dtype
        == torch.bool
    )


def test_a_padding_mask_refuses_causal_no_mask_and_per_query_or_per_head_masks():
    pad = SIGNATURES["qkv_padding"]
    keys = torch.tensor([T, F_, T]).reshape(1, 1, 1, 3)
    text = r"^a \(b, k\) padding mask cannot forbid single \(query, key\) pairs$"
    assert torch.equal(
        pad.encode(keys, False, (2, 2, 4, 3), torch.float32, "cpu"), torch.tensor([[T, F_, T]] * 2)
    )
    for allow, causal in [
        (keys, "top_left"),
        (None, False),
        (torch.ones(1, 2, 1, 3, dtype=torch.bool), False),
        (torch.ones(1, 1, 4, 3, dtype=torch.bool), False),
    ]:
        with pytest.raises(NotExpressible, match=text):
            pad.encode(allow, causal, (1, 2, 4, 3), torch.float32, "cpu")


def test_is_causal_is_a_python_bool_and_refuses_any_forbidden_key():
    flag = SIGNATURES["qkv_causal"]
    assert flag.encode(None, "bottom_right", (1, 1, 2, 3), torch.float32, "cpu") is True
    assert flag.encode(None, False, (1, 1, 2, 3), torch.float32, "cpu") is False
    assert (
        flag.encode(
            torch.ones(1, 1, 1, 3, dtype=torch.bool), "top_left", (1, 1, 2, 3), torch.float32, "cpu"
        )
        is True
    )
    with pytest.raises(NotExpressible, match=r"^is_causal cannot forbid keys$"):
        flag.encode(torch.tensor([T, T, F_]), False, (1, 1, 2, 3), torch.float32, "cpu")


def test_call_passes_q_k_v_and_the_argument_and_takes_the_first_of_a_tuple_or_list():
    sig = SIGNATURES["qkv_mask"]
    seen = []

    def fn(q, k, v, arg):
        seen.append((q, k, v, arg))
        return out

    out = torch.ones(1)
    assert sig.call(fn, 1, 2, 3, 4) is out
    assert seen == [(1, 2, 3, 4)]
    first, second = torch.zeros(1), torch.ones(1)
    out = (first, second)
    assert sig.call(fn, 1, 2, 3, 4) is first
    out = [first, second]
    assert sig.call(fn, 1, 2, 3, 4) is first


def test_the_planted_cases_work_with_one_feature():
    """The smallest input of the ladder has d = 1: NaN and inf are planted there too."""
    s = C.masked_nan_value((1, 1, 1, 2, 1), _gen(), True)
    assert (
        s.v.shape == (1, 1, 2, 1)
        and torch.isnan(s.v[..., 1, 0]).all()
        and torch.isfinite(s.v[..., 0, 0]).all()
    )
    s = C.masked_inf_key((1, 1, 1, 2, 1), _gen(), True)
    assert (
        s.k.shape == (1, 1, 2, 1)
        and (s.k[..., 1, 0] == torch.inf).all()
        and torch.isfinite(s.k[..., 0, 0]).all()
    )
