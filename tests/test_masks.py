"""Mask helpers: padding, bottom-right causal, combine."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import masks


def test_padding():
    m = masks.padding([3, 1, 0], max_len=4)
    assert m.dtype == torch.bool and m.shape == (3, 4)
    assert m.tolist() == [[True, True, True, False], [True, False, False, False], [False] * 4]
    assert masks.padding(torch.tensor([2, 5])).shape == (2, 5)
    with pytest.raises(ValueError, match="max_len=2 is shorter"):
        masks.padding([3], max_len=2)
    with pytest.raises(ValueError, match="1-d tensor of integers"):
        masks.padding(torch.tensor([1.5]))


def test_causal_square_is_lower_triangle():
    assert torch.equal(masks.causal(4), torch.ones(4, 4, dtype=torch.bool).tril())


def test_causal_is_bottom_right_aligned():
    # 2 new queries after 3 cached keys: query 0 is position 3, query 1 is position 4.
    m = masks.causal(2, 5)
    assert m.tolist() == [[True, True, True, True, False], [True] * 5]
    # each row i equals the last rows of the full square mask
    assert torch.equal(m, masks.causal(5)[-2:])
    # more queries than keys: the first rows see nothing
    assert masks.causal(3, 1).tolist() == [[False], [False], [True]]


def test_combine():
    a = torch.tensor([[True, False], [True, True]])
    b = torch.tensor([True, True]).view(1, 2)
    assert torch.equal(masks.combine(a, None, b), a)
    f = masks.combine(a, torch.full((2, 2), 0.5))
    assert f.dtype == torch.float32
    assert f[0, 1] == float("-inf") and f[0, 0] == 0.5
    assert masks.combine(None, None) is None
    with pytest.raises(ValueError, match="do not broadcast"):
        masks.combine(torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool or floating"):
        masks.combine(torch.ones(2, dtype=torch.int64))


def test_as_key_mask():
    pad = masks.padding([2, 1])
    assert masks.as_key_mask(pad).shape == (2, 1, 1, 2)
    with pytest.raises(ValueError, match=r"\(b, k\)"):
        masks.as_key_mask(torch.ones(2, 3, 4, dtype=torch.bool))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=4), min_size=1, max_size=3))
def test_broadcast_shapes_is_torchs_without_its_import(shapes):
    from attnlab import _checks

    try:
        want = torch.broadcast_shapes(*shapes)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="do not broadcast"):
            _checks.broadcast_shapes(*shapes)
        return
    assert _checks.broadcast_shapes(*shapes) == want
