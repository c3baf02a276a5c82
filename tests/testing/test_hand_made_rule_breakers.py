"""``check`` on hand-made attention functions, each wrong in one known way: the checker names exactly
the rules that way breaks, in the cases it breaks them, and passes every other case. Also the report's
lines, and which cases skip the gradient check (mask polarity, determinism, empty outputs)."""

from __future__ import annotations

import math

import pytest
import torch

import attnlab
from attnlab.testing import check

CASES = [
    "values",
    "deterministic",
    "broadcast mask (q, k)",
    "non-contiguous inputs",
    "masked NaN value",
    "masked inf key",
    "fully masked row",
    "mask polarity",
    "causal",
    "causal alignment (q < k)",
    "causal alignment (q > k)",
    "local window",
    "random row masks",
    "empty keys (k = 0)",
    "empty batch (b = 0)",
    "empty queries (q = 0)",
]
TAG = " [float32, cpu]"


def _failed(report):
    return {f.case: f.rule for f in report.failures}


def weights_times_nan_values(q, k, v, mask):
    """Masked weights are exact zeros, but 0 · NaN is NaN: a NaN value at a masked key leaks; a masked inf key
    gives 0 · inf in the gradient of q; fully masked rows are zeros (nan_to_num)."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0) @ v


def test_zero_weights_times_nan_values_breaks_the_planted_value_rules_only():
    report = check(weights_times_nan_values)
    assert _failed(report) == {
        "masked NaN value" + TAG: "NaN in a masked value reached the output",
        "masked inf key" + TAG: "inf in a masked key reached the gradient of q",
        "causal" + TAG: "a NaN in a future key reached an earlier row",
        "local window" + TAG: "NaN in a key outside every window reached the output",
        "random row masks" + TAG: "NaN in a key no row may attend reached the output",
    }
    assert report.passed == [
        c + TAG for c in CASES
        if c not in ("masked NaN value", "masked inf key", "causal", "local window", "random row masks")
    ]
    assert report.skipped == []
    assert [f.shape() for f in report.failures] == [
        "b=1 h=1 q=1 k=2 d=1",
        "b=1 h=1 q=1 k=2 d=1",
        "b=1 h=1 q=2 k=2 d=1",
        "b=1 h=1 q=1 k=2 d=1",
        "b=1 h=1 q=2 k=3 d=2",
    ]


def wrong_gradient(q, k, v, mask):
    """The right output, with the gradient of attention on 2q."""
    right = attnlab.attention(q, k, v, mask=mask)[0]
    other = attnlab.attention(2 * q, k, v, mask=mask)[0]
    return right.detach() + (other - other.detach())


def test_a_wrong_gradient_is_named_where_gradients_are_checked_and_nowhere_else():
    report = check(wrong_gradient)
    assert report.rules() == ["the gradient of q differs from the reference"]
    # no gradient check: determinism (outputs only), mask polarity, and the empty outputs; the causal
    # case checks the gradient of q on the rows that do not see its planted key
    assert report.passed == [
        c + TAG
        for c in (
            "deterministic",
            "mask polarity",
            "empty keys (k = 0)",
            "empty batch (b = 0)",
            "empty queries (q = 0)",
        )
    ]
    assert report.failures[0].message.startswith(
        "the gradient of q differs from the reference: max |error| "
    )
    assert check(wrong_gradient, grad=False).ok


def ignores_is_causal(q, k, v, is_causal):
    return attnlab.attention(q, k, v)[0]


def test_a_function_that_ignores_is_causal():
    report = check(ignores_is_causal, signature="qkv_causal")
    assert _failed(report) == {
        "causal" + TAG: "a NaN in a future key reached an earlier row",
        "causal alignment (q < k)" + TAG: "differs from the reference",
        "causal alignment (q > k)" + TAG: "differs from the reference",
    }
    assert report.passed == [c + TAG for c in CASES[-3:]]
    not_expressible = CASES[:8] + ["local window", "random row masks"]
    assert report.skipped == [c + TAG for c in not_expressible]
    lines = str(report).splitlines()
    assert lines[0] == "ignores_is_causal (signature 'qkv_causal'): 3 failed, 3 passed"
    assert lines[1] == (
        "  FAIL causal [float32, cpu]: a NaN in a future key reached an earlier row  "
        "[smallest input: b=1 h=1 q=2 k=2 d=1]"
    )
    assert lines[2].startswith(
        "  FAIL causal alignment (q < k) [float32, cpu]: differs from the reference: max |error| "
    )
    assert lines[2].endswith("  [smallest input: b=1 h=1 q=2 k=3 d=2]")
    assert lines[3].startswith(
        "  FAIL causal alignment (q > k) [float32, cpu]: differs from the reference: max |error| "
    )
    assert lines[3].endswith("  [smallest input: b=1 h=1 q=3 k=2 d=2]")
    assert lines[4] == "  passed: " + ", ".join(c + TAG for c in CASES[-3:])
    assert lines[5] == "  not expressible in this signature: " + ", ".join(
        c + TAG for c in not_expressible
    )
    assert (
        lines[6]
        == "  (failure.reproducer() returns Python source that rebuilds the smallest input)"
    )
    assert len(lines) == 7


def test_a_conforming_report_reads_in_one_line_per_list_and_tags_each_dtype():
    report = check(
        lambda q, k, v, m: attnlab.attention(q, k, v, mask=m)[0],
        dtypes=(torch.float64,),
        grad=False,
    )
    assert report.ok and report.failures == [] and report.skipped == []
    assert report.passed == [c + " [float64, cpu]" for c in CASES]
    lines = str(report).splitlines()
    assert lines == [
        f"test_a_conforming_report_reads_in_one_line_per_list_and_tags_each_dtype.<locals>.<lambda> (signature 'qkv_mask'): conforms, {len(CASES)} passed",
        "  passed: " + ", ".join(c + " [float64, cpu]" for c in CASES),
    ]


def test_a_call_that_crashes_is_reported_as_raised_with_the_error_text():
    def crash(q, k, v, mask):
        raise KeyError("boom")

    report = check(crash, dtypes=(torch.float64,))
    assert report.rules() == ["raised KeyError"]
    assert report.failures[0].message == "raised KeyError: 'boom'"
    assert report.failures[0].shape() == "b=1 h=1 q=1 k=2 d=1"  # the smallest input of the ladder
    assert [f.shape() for f in report.failures[-3:]] == [
        "b=2 h=2 q=3 k=0 d=3",
        "b=0 h=2 q=3 k=4 d=3",
        "b=2 h=2 q=0 k=4 d=3",
    ]  # the empty cases' one input


def test_unknown_signature_and_alignment_are_errors_naming_the_known_ones():
    with pytest.raises(ValueError) as err:
        check(weights_times_nan_values, signature="qkv")
    assert str(err.value) == (
        "signature='qkv' is not one of ['qkv_bias', 'qkv_causal', 'qkv_mask', 'qkv_padding', "
        "'qkv_torch_mask']"
    )
    with pytest.raises(ValueError) as err:
        check(weights_times_nan_values, causal="left")
    assert str(err.value) == "causal='left' is not one of ('top_left', 'bottom_right')"
