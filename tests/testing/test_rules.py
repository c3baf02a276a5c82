"""The rule functions attnlab.testing.judge and attnlab's own conformance suite both call: each
passes what keeps the rule and names what breaks it, with its numbers."""

from __future__ import annotations

import pytest
import torch

from attnlab.testing.rules import (
    RuleBroken,
    close,
    finite_gradients,
    has_shape,
    rows_zero,
    untouched,
)


def test_untouched_names_a_planted_value_that_reached_or_changed_the_result():
    clean = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    untouched("NaN in a masked value", "the output", clean + 1e-7, clean, atol=1e-6)
    untouched("NaN in a masked value", "the output", clean.clone(), clean)  # equal: within the default atol 0
    with pytest.raises(RuleBroken, match=r"^NaN changed the output: max \|difference\| 1\.0e-07$"):
        untouched("NaN", "the output", clean + torch.tensor([[0.0, 0.0], [0.0, 1e-7]]).double(), clean.double())
    untouched("NaN in a masked value", "the output", clean + 0.5, clean, atol=0.5)  # a difference of atol keeps it
    with pytest.raises(RuleBroken, match=r"^NaN in a masked value reached the output$"):
        untouched("NaN in a masked value", "the output", torch.tensor([1.0, float("nan")]))
    with pytest.raises(RuleBroken, match=r"^inf in a masked key changed gradient 0: max \|difference\| 5\.0e-01$") as err:
        untouched("inf in a masked key", "gradient 0", clean + torch.tensor([[0.0, 0.5], [0.0, 0.0]]), clean, atol=1e-6)
    assert err.value.rule == "inf in a masked key changed gradient 0"
    with pytest.raises(RuleBroken, match="changed the shape of the output"):
        untouched("NaN", "the output", clean[:1], clean)


def test_rows_zero_tells_nan_from_nonzero_rows():
    out = torch.zeros(2, 3, 4)
    rows_zero(out, torch.tensor([[True, False, True], [False, False, False]]))
    out[0, 1] = 0.25
    rows_zero(out, torch.tensor([[True, False, True], [False, False, False]]))  # row (0, 1) is not selected
    with pytest.raises(RuleBroken, match=r"^a fully masked row is not zero: max \|value\| 2\.5e-01$"):
        rows_zero(out[0])
    out[1, 0, 0] = float("nan")
    with pytest.raises(RuleBroken, match=r"^a padded query's row gives NaN$"):
        rows_zero(out[1], what="a padded query's row")
    out[1, 0, 0] = float("inf")
    with pytest.raises(RuleBroken, match=r"^a row with no keys is not finite$"):
        rows_zero(out[1], what="a row with no keys")


def test_finite_gradients_names_the_gradient_and_what_was_planted():
    good, bad = torch.ones(3), torch.tensor([0.0, float("nan")])
    finite_gradients({"q": good, "k": None})
    with pytest.raises(RuleBroken, match=r"^the gradient of k is not finite$"):
        finite_gradients({"q": good, "k": bad})
    with pytest.raises(RuleBroken, match=r"^NaN in a masked value reached the gradient of v$"):
        finite_gradients({"v": bad}, "masked NaN value")
    with pytest.raises(RuleBroken, match=r"^a fully masked row gives non-finite gradients \(of q\)$"):
        finite_gradients({"q": bad}, "fully masked row")


def test_has_shape_and_close():
    has_shape(torch.empty(0, 2, 3), (0, 2, 3))
    with pytest.raises(RuleBroken, match=r"wrong shape: \(0, 2, 3\), expected \(0, 2, 4\)"):
        has_shape(torch.empty(0, 2, 3), (0, 2, 4))
    with pytest.raises(RuleBroken, match="not a tensor: got tuple"):
        has_shape((torch.empty(1),), (1,))
    want = torch.tensor([0.0, 10.0], dtype=torch.float64)
    close(torch.tensor([0.01, 10.1]), want, 0.01)  # 0.1 ≤ 0.01 · (1 + 10)
    with pytest.raises(RuleBroken, match=r"^bfloat16 drifted: max \|error\| 2\.0e-01 at \(1,\)$"):
        close(torch.tensor([0.0, 10.2]), want, 0.01, "bfloat16 drifted")
    with pytest.raises(RuleBroken, match="differs from the reference"):
        close(torch.tensor([0.0, float("nan")]), want, 0.01)
