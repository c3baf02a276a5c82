"""attnlab.testing.judge on outputs made by hand: the exact messages of a wrong dtype and of an output
with no gradient; an input the function ignores has a zero gradient (compared, not skipped); under the
causal case only the rows before the last are judged; a fully masked row is checked to be zero in
any case; and planted NaN/inf are looked for in the rows that attend something."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.testing import RuleBroken, judge

F64 = torch.float64


def _qkv(n=2, m=3, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 1, length, d, generator=g, dtype=F64) for length in (n, m, m)]


def softmax_attention(q, k, v, allow=None):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if allow is not None:
        s = s.masked_fill(~allow, -torch.inf)
    return s.softmax(-1) @ v


def test_a_wrong_dtype_and_a_missing_gradient_are_named_with_their_details():
    q, k, v = _qkv()
    with pytest.raises(RuleBroken) as err:
        judge("values", softmax_attention(q, k, v).float(), q, k, v, grad=False)
    assert (
        str(err.value)
        == "the output's dtype differs from the input's: torch.float32, expected torch.float64"
    )
    assert err.value.rule == "the output's dtype differs from the input's"
    q.requires_grad_()
    with pytest.raises(RuleBroken) as err:
        judge("values", softmax_attention(q, k, v).detach(), q, k, v)
    assert (
        str(err.value) == "the output carries no gradient (pass grad=False to check outputs only)"
    )
    judge("values", softmax_attention(q, k, v).detach(), q, k, v, grad=False)
    judge("values", softmax_attention(q, k, v), q, k, v)


def test_an_input_the_output_ignores_has_a_zero_gradient_that_is_compared():
    q, k, v = (t.requires_grad_() for t in _qkv())

    def ignores_k(q, k, v):  # the right output, computed from a detached copy of k
        return softmax_attention(q, k.detach(), v)

    with pytest.raises(
        RuleBroken, match=r"^the gradient of k differs from the reference: max \|error\| "
    ):
        judge("values", ignores_k(q, k, v), q, k, v)
    k.requires_grad_(False)  # k not asked for: nothing to compare
    judge("values", ignores_k(q, k, v), q, k, v)


def test_the_causal_case_judges_every_row_but_the_last():
    q, k, v = _qkv(n=3, m=3)
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    out = softmax_attention(q, k, v, causal)
    judge("causal", out, q, k, v, causal=True, grad=False)
    last = out.clone()
    last[..., 2, :] = torch.nan  # the last row may see the planted key: not judged
    judge("causal", last, q, k, v, causal=True, grad=False)
    for row in (0, 1):
        wrong = out.clone()
        wrong[..., row, 0] += 1e-3
        with pytest.raises(
            RuleBroken,
            match=rf"^differs from the reference: max \|error\| 1\.0e-03 at \(0, 0, {row}, 0\)$",
        ):
            judge("causal", wrong, q, k, v, causal=True, grad=False)
        wrong[..., row, 0] = torch.nan
        with pytest.raises(RuleBroken, match=r"^a NaN in a future key reached an earlier row$"):
            judge("causal", wrong, q, k, v, causal=True, grad=False)
    q1 = q[..., :1, :]  # one query: no earlier row, nothing judged
    judge(
        "causal",
        torch.full((1, 1, 1, 2), torch.nan, dtype=F64),
        q1,
        k[..., :1, :],
        v[..., :1, :],
        causal=True,
        grad=False,
    )


def test_a_fully_masked_row_must_be_zero_in_the_values_case_too():
    q, k, v = _qkv()
    allow = torch.tensor([[False, False, False], [True, False, True]]).reshape(1, 1, 2, 3)
    out = torch.nan_to_num(softmax_attention(q, k, v, allow))
    judge("values", out, q, k, v, allow=allow, grad=False)
    out[..., 0, 1] = 0.5
    with pytest.raises(
        RuleBroken, match=r"^a fully masked row is not zero: max \|value\| 5\.0e-01$"
    ):
        judge("values", out, q, k, v, allow=allow, grad=False)


@pytest.mark.parametrize(
    ("case", "rule"),
    [
        ("masked NaN value", "NaN in a masked value reached the output"),
        ("masked inf key", "inf in a masked key reached the output"),
    ],
)
def test_planted_cases_look_for_nan_in_the_rows_that_attend_something(case, rule):
    q, k, v = _qkv()
    allow = torch.tensor([[False, False, False], [True, False, True]]).reshape(1, 1, 2, 3)
    out = torch.nan_to_num(softmax_attention(q, k, v, allow))
    out[..., 0, :] = (
        torch.nan
    )  # the fully masked row: not looked at for the planted NaN here, but it must be zero
    with pytest.raises(RuleBroken, match=r"^a fully masked row gives NaN$"):
        judge(case, out, q, k, v, allow=allow, grad=False)
    out[..., 0, :] = 0.0
    judge(case, out, q, k, v, allow=allow, grad=False)
    out[..., 1, 1] = torch.nan
    with pytest.raises(RuleBroken, match=rf"^{rule}$"):
        judge(case, out, q, k, v, allow=allow, grad=False)


def test_an_inverted_polarity_and_the_other_causal_alignment_are_named_exactly():
    q, k, v = _qkv(n=2, m=3)
    allow = torch.tensor([False, True, True])
    with pytest.raises(RuleBroken) as err:
        judge(
            "mask polarity",
            softmax_attention(q, k, v, ~allow.expand(1, 1, 2, 3)),
            q,
            k,
            v,
            allow=allow,
            grad=False,
        )
    assert str(err.value) == "mask polarity looks inverted"
    with pytest.raises(
        RuleBroken, match=r"^differs from the reference: "
    ):  # wrong, but not inverted
        judge(
            "mask polarity", 2 * softmax_attention(q, k, v, allow), q, k, v, allow=allow, grad=False
        )
    judge("mask polarity", softmax_attention(q, k, v, allow), q, k, v, allow=allow, grad=False)
    q = q[..., :2, :]
    bottom_right = torch.tensor([[True, True, False], [True, True, True]])
    top_left = torch.tensor([[True, False, False], [True, True, False]])
    for declared, got, other in (
        ("top_left", bottom_right, "bottom-right"),
        ("bottom_right", top_left, "top-left"),
    ):
        with pytest.raises(RuleBroken) as err:
            judge(
                "causal alignment (q < k)",
                softmax_attention(q, k, v, got),
                q,
                k,
                v,
                causal=declared,
                grad=False,
            )
        assert str(err.value) == f"the causal mask looks {other} aligned (declared {declared!r})"
        assert err.value.rule == f"the causal mask looks {other} aligned"
    judge(
        "causal alignment (q < k)",
        softmax_attention(q, k, v, top_left),
        q,
        k,
        v,
        causal="top_left",
        grad=False,
    )


def test_a_planted_value_that_changes_the_shape_says_both_shapes():
    from attnlab.testing.rules import untouched

    with pytest.raises(RuleBroken) as err:
        untouched("NaN", "the output", torch.zeros(1, 2), torch.zeros(2, 2))
    assert str(err.value) == "NaN changed the shape of the output: (1, 2), clean (2, 2)"
