"""Patterns are values: a built pattern's fields cannot be set, and the tensors it was given are its
own, so a kernel's plan (kept on the pattern) always describes the pattern it serves."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab import patterns


def test_setting_a_field_of_a_used_pattern_is_refused_and_its_plan_stays_right():
    q = k = v = torch.randn(1, 1, 8, 4)
    p = patterns.global_tokens([0])
    before, _ = attnlab.kernels.block_sparse_attention(q, k, v, p, block=4)
    with pytest.raises(AttributeError) as e:
        p.indices = torch.tensor([5])
    assert str(e.value) == ("a pattern is immutable: global_tokens([0]) cannot take a new 'indices'; build a new "
                            "pattern instead (its kernel plans belong to the pattern they were made for)")
    after, _ = attnlab.kernels.block_sparse_attention(q, k, v, p, block=4)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    dense, _ = attnlab.attention(q, k, v, mask=p.materialize(8))
    torch.testing.assert_close(after, dense, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: patterns.sliding_window(2), lambda: patterns.causal() & patterns.strided(2),
                                  lambda: patterns.documents([3, 5])])
def test_every_kind_of_pattern_refuses_a_new_field(make):
    p = make()
    with pytest.raises(AttributeError, match="^a pattern is immutable"):
        p.block = 3


def test_a_given_block_layout_is_the_patterns_own_copy():
    layout = torch.eye(2, dtype=torch.bool)
    p = patterns.block_sparse(layout, 4)
    layout[0, 1] = True  # the caller changes its tensor afterwards
    assert p.materialize(8)[0, 4:].tolist() == [False] * 4
