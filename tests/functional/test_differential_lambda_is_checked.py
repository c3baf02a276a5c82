"""``differential_attention``'s λ is a finite number or a floating tensor that broadcasts to the
output's (..., 1, 1); anything else is one ValueError naming λ, the shape it must fit and what was given."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab.functional.differential import differential_attention

TARGET = "lam (λ) must be a finite number or a floating tensor that broadcasts to (..., 1, 1) = (1, 2, 1, 1); got "


def _qkv():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 4, generator=g)
    return q, q.flip(-2), torch.randn(1, 2, 3, 8, generator=g)


@pytest.mark.parametrize("lam,shown", [(math.nan, "nan"), (math.inf, "inf"), ("x", "'x'"), (None, "None"), (True, "True"),
                                       (torch.ones(5), "a tensor of shape (5) and dtype torch.float32"),
                                       (torch.ones(3, 1, 1), "a tensor of shape (3, 1, 1) and dtype torch.float32"),
                                       (torch.tensor(1), "a tensor of shape () and dtype torch.int64")])
def test_a_lambda_that_is_not_a_finite_number_or_a_fitting_tensor_is_refused(lam, shown):
    q, k, v = _qkv()
    with pytest.raises(ValueError) as e:
        differential_attention(q, k, q, k, v, lam)
    assert str(e.value) == TARGET + shown


def test_a_number_and_a_per_head_tensor_give_the_difference_of_the_two_maps():
    q, k, v = _qkv()
    a1 = torch.softmax(q @ k.transpose(-2, -1) / 2, -1)  # √4 = 2; both maps are the same here
    lam = torch.tensor([0.25, 0.5]).view(1, 2, 1, 1)
    out, w = differential_attention(q, k, q, k, v, lam, need_weights=True)
    torch.testing.assert_close(w, a1 * (1 - lam))
    torch.testing.assert_close(out, (a1 * (1 - lam)) @ v)
    out, _ = differential_attention(q, k, q, k, v, 0.5)
    torch.testing.assert_close(out, 0.5 * a1 @ v)
