"""``patterns.documents`` takes a non-empty 1-D list (or integer tensor) of integer lengths >= 0:
anything else is a ValueError naming what was given (a float length is not truncated)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P

HEAD = "documents needs a non-empty list of lengths >= 0"
BAD = [
    ([2.5, 3.7], "; got [2.5, 3.7] (2.5 is not an integer >= 0)"),
    ([2, 3.0], "; got [2, 3.0] (3.0 is not an integer >= 0)"),
    ([2, -1], "; got [2, -1] (-1 is not an integer >= 0)"),
    ([True, 2], "; got [True, 2] (True is not an integer >= 0)"),
    ([2, None], "; got [2, None] (None is not an integer >= 0)"),
    ([], "; got []"),
    ("23", "; got '23'"),
    (5, "; got 5"),
    (torch.tensor([2.5, 3.7]), " (a 1-D integer tensor on a device that holds values); got a torch.float32 tensor of shape (2) on cpu"),
    (torch.tensor([[2, 3]]), " (a 1-D integer tensor on a device that holds values); got a torch.int64 tensor of shape (1, 2) on cpu"),
    (torch.tensor([2, 3], device="meta"), " (a 1-D integer tensor on a device that holds values); got a torch.int64 tensor of shape (2) on meta"),
    (torch.tensor([-1, 3]), "; got [-1, 3] (-1 is not an integer >= 0)"),
]


@pytest.mark.parametrize("lengths,shown", BAD, ids=[s[:50] for _, s in BAD])
def test_bad_document_lengths_are_a_value_error_naming_them(lengths, shown):
    with pytest.raises(ValueError, match="^" + re.escape(HEAD + shown) + "$"):
        P.documents(lengths)


@pytest.mark.parametrize("lengths", [[2, 0, 3], (2, 0, 3), torch.tensor([2, 0, 3], dtype=torch.int32), np.array([2, 0, 3])])
def test_integer_lengths_in_any_container_give_the_block_diagonal(lengths):
    want = np.zeros((6, 6), dtype=bool)
    want[:2, :2] = want[2:5, 2:5] = True  # the empty document holds no position; position 5 is past the total
    assert np.array_equal(P.documents(lengths).materialize(6).numpy(), want)
