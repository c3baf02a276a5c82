"""attnlab.testing.check: a conforming attention passes every case; each planted defect is caught,
named in plain words and reproduced by the source its failure returns.

The implementations under test are written here (the textbook one, its -1e9 variant, an inverted
polarity, a wrong scale); torch's SDPA is recorded as it behaves in the installed torch.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import attnlab
from attnlab.testing import RuleBroken, assert_conforms, check, judge, reference, scorecard
from attnlab.testing.cases import CASES
from attnlab.testing.signatures import SIGNATURES, NotExpressible


def ours(q, k, v, mask):
    return attnlab.attention(q, k, v, mask=mask)


def textbook(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(~mask, float("-inf")).softmax(-1) @ v


def big_negative(q, k, v, mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return s.masked_fill(~mask, -1e9).softmax(-1) @ v


def inverted(q, k, v, mask):
    return ours(q, k, v, ~mask)


def wrong_scale(q, k, v, mask):
    return attnlab.attention(q, k, v, mask=mask, scale=1 / q.shape[-1])


def test_attnlab_attention_conforms_in_every_signature_and_dtype():
    half = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
    assert_conforms(ours, dtypes=half)
    assert_conforms(lambda q, k, v, m: attnlab.attention(q, k, v, mask=~m), signature="qkv_torch_mask")
    assert_conforms(lambda q, k, v, bias: attnlab.attention(q, k, v, mask=bias), signature="qkv_bias")
    assert_conforms(lambda q, k, v, keep: attnlab.attention(q, k, v, mask=keep[:, None, None, :]), signature="qkv_padding")
    causal = lambda q, k, v, c: attnlab.attention(q, k, v, causal=c)  # noqa: E731
    report = assert_conforms(causal, signature="qkv_causal", causal="bottom_right")
    assert "causal alignment (q < k) [float32, cpu]" in report.passed and "values [float32, cpu]" in report.skipped


def test_a_causal_mask_aligned_otherwise_than_declared_is_named():
    causal = lambda q, k, v, c: attnlab.attention(q, k, v, causal=c)  # noqa: E731  (bottom-right)
    failure, more_queries = check(causal, signature="qkv_causal").failures
    assert failure.message == "the causal mask looks bottom-right aligned (declared 'top_left')"
    assert failure.shape() == "b=1 h=1 q=1 k=2 d=1"
    assert (more_queries.case, more_queries.message) == (
        "causal alignment (q > k) [float32, cpu]", "the causal mask looks bottom-right aligned (declared 'top_left')")
    assert more_queries.shape() == "b=1 h=1 q=3 k=1 d=1"
    with pytest.raises(RuleBroken, match="looks bottom-right aligned"):
        exec(failure.reproducer(), {"fn": causal})
    sdpa = lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c)  # noqa: E731
    assert "the causal mask looks top-left aligned" in check(sdpa, signature="qkv_causal", causal="bottom_right").rules()
    with pytest.raises(ValueError, match="'diagonal' is not one of"):
        check(causal, signature="qkv_causal", causal="diagonal")


def test_the_textbook_implementation_leaks_masked_nan_and_gives_nan_rows():
    report = check(textbook)
    assert not report.ok
    assert report.rules() == [
        "NaN in a masked value reached the output",
        "inf in a masked key reached the gradient of q",  # 0 · inf in the backward of scores @ k
        "a fully masked row gives NaN",
        "a NaN in a future key reached an earlier row",
        "NaN in a key outside every window reached the output",
        "NaN in a key no row may attend reached the output",
    ]
    assert "values [float32, cpu]" in report.passed and "mask polarity [float32, cpu]" in report.passed


def test_minus_1e9_gives_fully_masked_rows_uniform_weights():
    report = check(big_negative)
    assert "a fully masked row is not zero" in report.rules()
    (row,) = [f for f in report.failures if f.rule == "a fully masked row is not zero"]
    q, k, v = (row.inputs[n] for n in "qkv")
    torch.testing.assert_close(big_negative(q, k, v, row.inputs["argument"]), v.mean(-2, keepdim=True).expand(-1, -1, q.shape[-2], -1))
    assert "a fully masked row gives NaN" not in report.rules()


def test_an_inverted_mask_polarity_is_named():
    report = check(inverted)
    assert "mask polarity looks inverted" in report.rules()
    assert "mask polarity looks inverted" not in check(ours).rules()
    # the same function declared with torch's polarity conforms
    assert check(inverted, signature="qkv_torch_mask").ok


def test_a_wrong_scale_differs_from_the_reference_with_the_place_and_size():
    report = check(wrong_scale)
    assert report.rules() == ["differs from the reference"]
    (values,) = [f for f in report.failures if f.case == "values [float32, cpu]"]
    assert values.message.startswith("differs from the reference: max |error| ")
    assert " at (0, 0, " in values.message
    # the declared scale makes the same function conform
    assert check(lambda q, k, v, m: attnlab.attention(q, k, v, mask=m, scale=0.5), scale=0.5).ok


def test_torch_sdpa_as_it_behaves_here():
    # Recorded, not prescribed (torch 2.13 on the CPU): SDPA gives fully masked rows zeros and
    # handles empty inputs, but a NaN/inf at a masked key or value still reaches the output
    # (the mask is added to the scores, and 0 · NaN = NaN in weights @ v).
    report = check(F.scaled_dot_product_attention)  # its 4th argument is a bool mask, True = may attend
    assert report.rules() == [
        "NaN in a masked value reached the output",
        "inf in a masked key reached the output",
        "a NaN in a future key reached an earlier row",
        "NaN in a key outside every window reached the output",
        "NaN in a key no row may attend reached the output",
    ]
    assert {"values [float32, cpu]", "fully masked row [float32, cpu]", "mask polarity [float32, cpu]",
            "empty keys (k = 0) [float32, cpu]"} <= set(report.passed)
    causal = check(lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c), signature="qkv_causal")
    assert causal.rules() == ["a NaN in a future key reached an earlier row"]


@pytest.mark.parametrize("fn", [textbook, big_negative, inverted, wrong_scale])
def test_every_reproducer_shows_its_failure_again(fn):
    report = check(fn, dtypes=(torch.float32, torch.bfloat16))
    assert report.failures
    for failure in report.failures:
        source = failure.reproducer()
        assert "out = fn(q, k, v, mask)" in source
        with pytest.raises(Exception) as err:  # noqa: PT011 (a rule broken, or the function's own error)
            exec(source, {"fn": fn})
        got = err.value
        assert (str(got) if isinstance(got, RuleBroken) else f"raised {type(got).__name__}: {got}") == failure.message


def test_a_reproducer_imports_a_function_it_can_import():
    (failure, *_) = check(scorecard.textbook).failures
    source = failure.reproducer()
    assert 'if "fn" not in globals():\n    from attnlab.testing.scorecard import textbook as fn\n' in source
    with pytest.raises(RuleBroken, match="NaN in a masked value reached the output"):
        exec(source, {})


def test_the_reproducer_is_the_smallest_input_that_fails():
    (nan,) = [f for f in check(textbook).failures if f.rule == "NaN in a masked value reached the output"]
    assert nan.shape() == "b=1 h=1 q=1 k=2 d=1"
    assert "v = torch.tensor([[[[" in nan.reproducer() and "nan" in nan.reproducer()


def test_the_report_reads_and_assert_conforms_raises_it():
    report = check(textbook)
    text = str(report)
    assert text.startswith(f"textbook (signature 'qkv_mask'): 6 failed, {len(CASES) - 6} passed\n")
    assert "FAIL masked NaN value [float32, cpu]: NaN in a masked value reached the output" in text
    with pytest.raises(AssertionError, match="a fully masked row gives NaN"):
        assert_conforms(textbook)


def test_a_crash_is_a_failure_and_an_unknown_signature_an_error():
    def no_empty(q, k, v, mask):
        if not k.shape[-2]:
            raise ValueError("no keys")
        return ours(q, k, v, mask)

    assert check(no_empty).rules() == ["raised ValueError"]
    with pytest.raises(ValueError, match="'qkv_masks' is not one of"):
        check(ours, signature="qkv_masks")


def flattening(q, k, v, mask):
    """Views its inputs as (b·h, n, d) and expects a dense (b, h, q, k) mask."""
    b, h, n, d = q.shape
    m = k.shape[-2]
    flat = [t.view(b * h, t.shape[-2], d) for t in (q, k, v)]
    out = ours(*flat, mask.view(b * h, n, m))[0]
    return out.view(b, h, n, d)


def test_non_contiguous_inputs_and_broadcast_masks_are_cases_of_their_own():
    report = check(flattening)
    broken = {f.case: f for f in report.failures}
    assert {"non-contiguous inputs [float32, cpu]", "broadcast mask (q, k) [float32, cpu]"} <= set(broken)
    assert broken["broadcast mask (q, k) [float32, cpu]"].rule == "raised RuntimeError"  # (q, k) cannot be viewed
    assert broken["non-contiguous inputs [float32, cpu]"].message.startswith("raised RuntimeError: view size")
    source = broken["non-contiguous inputs [float32, cpu]"].reproducer()
    assert ".transpose(1, 2).requires_grad_()" in source
    with pytest.raises(RuntimeError, match="view size"):
        exec(source, {"fn": flattening})
    assert "values [float32, cpu]" in report.passed


def test_an_output_that_changes_between_two_calls_is_named():
    def noisy(q, k, v, mask):
        return ours(q, k, v, mask)[0] * (1 + 1e-6 * torch.rand(()))  # zeros stay zeros

    (failure,) = check(noisy).failures
    assert failure.case == "deterministic [float32, cpu]"
    assert failure.message.startswith("two calls on the same input give different outputs: max |difference| ")
    assert "again = fn(q, k, v, mask)" in failure.reproducer()
    with pytest.raises(RuleBroken, match="two calls on the same input give different outputs"):
        exec(failure.reproducer(), {"fn": noisy})


def test_a_detached_output_or_wrong_dtype_is_named():
    assert "the output carries no gradient" in check(lambda q, k, v, m: ours(q, k, v, m)[0].detach()).rules()
    assert check(lambda q, k, v, m: ours(q, k, v, m)[0].detach(), grad=False).ok
    assert check(lambda q, k, v, m: ours(q.double(), k.double(), v.double(), m)[0]).rules() == [
        "the output's dtype differs from the input's"]


def test_the_reference_is_softmax_attention_by_hand():
    q = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [float("nan"), 0.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[1.0], [3.0], [float("inf")]]]], dtype=torch.float64)
    allow = torch.tensor([True, True, False])
    w0, w1 = math.exp(1 / math.sqrt(2)), 1.0  # exp(q·k / √2) for the two allowed keys
    assert reference(q, k, v, allow).item() == pytest.approx((w0 * 1 + w1 * 3) / (w0 + w1), abs=1e-12)
    assert reference(q, k, v, torch.zeros(3, dtype=torch.bool)).item() == 0.0
    with pytest.raises(AssertionError, match="a fully masked row is not zero"):
        judge("fully masked row", torch.ones(1, 1, 1, 1, dtype=torch.float64), q, k, v,
              allow=torch.zeros(3, dtype=torch.bool), grad=False)


def test_the_scorecard_prints_one_row_per_implementation_at_a_small_size():
    rows = [r for r in scorecard.ROWS if r[0].startswith("textbook") or r[0] == "attnlab `attention`"]
    table = scorecard.scorecard(rows, half=False).splitlines()
    assert table[0].startswith("| implementation | signature | values | deterministic | broadcast mask (q, k) |")
    assert len(table) == 4
    assert table[2].startswith("| textbook: masked_fill(-inf), softmax, @ v (torch ")
    assert "| ✗ a fully masked row gives NaN |" in table[2]
    assert table[3].endswith("| `qkv_mask` |" + " ✓ |" * len(scorecard.COLUMNS))


def test_half_precision_is_held_to_its_own_budget():
    def in_half(q, k, v, mask):  # computes in float16 whatever it is given
        return ours(q.half(), k.half(), v.half(), mask)[0].to(q.dtype)

    report = check(in_half, dtypes=(torch.float32, torch.float16))
    (values,) = [f for f in report.failures if f.case == "values [float32, cpu]"]
    assert values.rule == "differs from the reference"
    assert not [f for f in report.failures if "float16" in f.case]  # within float16's budget


def test_an_additive_mask_with_the_lowest_float_instead_of_minus_inf():
    def lowest(q, k, v, bias):  # how many libraries build their additive masks
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return (s + bias.clamp(min=torch.finfo(bias.dtype).min)).softmax(-1) @ v

    rules = check(lowest, signature="qkv_bias").rules()
    assert "a fully masked row is not zero" in rules and "NaN in a masked value reached the output" in rules
    assert "mask polarity looks inverted" not in rules


def test_each_case_draws_its_inputs_from_the_seed_given_not_from_torchs_global_generator():
    with torch.random.fork_rng():
        torch.manual_seed(123)  # the global generator, which a case must not read
        report = check(wrong_scale, seed=5)
    (values,) = [f for f in report.failures if f.case == "values [float32, cpu]"]
    b, h, n, d = values.inputs["q"].shape
    # "values", the first case, draws q first from a generator seeded with seed + 0, in float64
    want = torch.randn(b, h, n, d, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert torch.equal(values.inputs["q"].detach(), want.float())


def test_a_padding_signature_runs_every_case_a_key_mask_can_say_the_empty_ones_included():
    report = check(lambda q, k, v, keep: attnlab.attention(q, k, v, mask=keep[:, None, None, :]), signature="qkv_padding")
    assert report.ok
    assert report.skipped == ["broadcast mask (q, k) [float32, cpu]", "causal [float32, cpu]",
                              "causal alignment (q < k) [float32, cpu]", "causal alignment (q > k) [float32, cpu]",
                              "local window [float32, cpu]", "random row masks [float32, cpu]"]
    assert {"empty keys (k = 0) [float32, cpu]", "empty batch (b = 0) [float32, cpu]",
            "empty queries (q = 0) [float32, cpu]"} <= set(report.passed)


def test_signatures_encode_a_key_mask_or_a_causal_flag_and_say_what_they_cannot_express():
    padding, causal = SIGNATURES["qkv_padding"], SIGNATURES["qkv_causal"]
    keep = torch.tensor([[True, False, True], [False, True, True]]).reshape(2, 1, 1, 3)
    assert torch.equal(padding.encode(keep, False, (2, 4, 5, 3), torch.float32, "cpu"),
                       torch.tensor([[True, False, True], [False, True, True]]))
    assert torch.equal(padding.encode(keep[:1], False, (2, 4, 5, 3), torch.float32, "cpu"),
                       torch.tensor([[True, False, True], [True, False, True]]))  # one row for every batch element
    with pytest.raises(NotExpressible, match=r"^a \(b, k\) padding mask cannot forbid single \(query, key\) pairs$"):
        padding.encode(torch.ones(2, 1, 5, 3, dtype=torch.bool), False, (2, 4, 5, 3), torch.float32, "cpu")
    assert causal.encode(None, "top_left", (2, 4, 5, 3), torch.float32, "cpu") is True
    assert causal.encode(torch.ones(2, 1, 1, 3, dtype=torch.bool), False, (2, 4, 5, 3), torch.float32, "cpu") is False
    with pytest.raises(NotExpressible, match=r"^is_causal cannot forbid keys$"):
        causal.encode(keep, "top_left", (2, 4, 5, 3), torch.float32, "cpu")
