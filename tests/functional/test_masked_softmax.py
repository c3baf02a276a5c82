"""masked_softmax's defined numerics, against float64 values worked out by hand.

Half-precision scores are computed in float32, a fully masked row is zero in every dtype,
the input is never written to, and the checks name the argument.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnlab._checks import DtypeError
from attnlab.functional.softmax import masked_softmax


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_scores_and_bias_are_added_in_float32(dtype):
    # 2048 + 1 is not a float16/bfloat16 number (spacing 2 and 16 there): added in half precision the
    # bias would vanish and the row would be [0.5, 0.5]; in float32 it is softmax([2049, 2048]).
    scores = torch.tensor([[2048.0, 2048.0]], dtype=dtype)
    bias = torch.tensor([[1.0, 0.0]], dtype=dtype)
    w = masked_softmax(scores, bias)
    assert w.dtype == dtype
    e = math.e / (1 + math.e)  # 0.7311
    want = torch.tensor([[e, 1 - e]], dtype=torch.float64).to(dtype)
    assert torch.equal(w, want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_fully_masked_row_is_zero_in_every_dtype(dtype):
    scores = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtype)
    keep = torch.tensor([[True, False], [False, False]])
    for mask in (keep, torch.zeros(2, 2, dtype=dtype).masked_fill(~keep, float("-inf"))):
        w = masked_softmax(scores, mask)
        assert w.tolist() == [[1.0, 0.0], [0.0, 0.0]]


def test_the_input_is_never_written_to():
    scores = torch.tensor([[1.0, 2.0, 3.0]])
    before = scores.clone()
    bias = torch.tensor([[0.0, -1.0, float("-inf")]])
    w = masked_softmax(scores, bias)  # softmax([1, 1, -inf]) = [0.5, 0.5, 0]
    assert w.tolist() == [[0.5, 0.5, 0.0]]
    assert torch.equal(scores, before)
    masked_softmax(scores, torch.tensor([[True, True, False]]))
    assert torch.equal(scores, before)


def test_checks_name_the_argument():
    with pytest.raises(DtypeError, match=r"^scores must be a floating-point tensor .*got dtype torch.int64$"):
        masked_softmax(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(DtypeError, match=r"must have the scores' dtype torch.float32; got mask dtype torch.float64"):
        masked_softmax(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64))


def test_in_place_reuses_the_scores_storage_only_when_allowed():
    """``_softmax(..., inplace=True)`` (the core's reference path) overwrites the caller's own scores
    instead of allocating: the weights live in the scores' storage. Never when the scores need a gradient."""
    from attnlab.functional.softmax import _softmax

    s = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    keep = torch.tensor([[True, True, False], [False, False, False]])  # softmax([1, 2]) = [0.2689, 0.7311]; row 2 dead
    e = 1 / (1 + math.e)
    want = torch.tensor([[e, 1 - e, 0.0], [0.0, 0.0, 0.0]])
    for mask in (keep, torch.zeros(2, 3).masked_fill(~keep, float("-inf"))):
        for grad_mode in (torch.no_grad, torch.enable_grad):  # grad on, but these scores need none
            x = s.clone()
            with grad_mode():
                w = _softmax(x, mask, -1, inplace=True)
            torch.testing.assert_close(w, want, atol=1e-7, rtol=0)
            assert w.data_ptr() == x.data_ptr()
        x = s.clone()
        w = _softmax(x, mask, -1, inplace=False)
        assert w.data_ptr() != x.data_ptr() and torch.equal(x, s)
        x = s.clone().requires_grad_()
        w = _softmax(x, mask, -1, inplace=True)
        assert w.data_ptr() != x.data_ptr() and torch.equal(x.detach(), s)
    x = s[:1].clone()
    with torch.no_grad():
        assert _softmax(x, None, -1, inplace=True).data_ptr() == x.data_ptr()
