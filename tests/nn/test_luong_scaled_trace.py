"""A traced, scaled Luong score records its scaled scores: the recorded weights are the softmax of a recorded step.

Before the fix the trace held the unscaled scores qᵀk (or qᵀW_a k) and weights softmax(qᵀk / √d_k), so a learner
recomputing the weights from the shown scores got other numbers. Reference: float64 NumPy of Luong et al. 2015
eq. 8 with the scale of Vaswani et al. 2017 (1/√d_k).
"""

import numpy as np
import pytest
import torch

import attnlab
from attnlab.nn import LuongAttention

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("score", ["dot", "general"])
def test_traced_scaled_scores_are_recorded_and_the_weights_are_their_softmax(score):
    torch.manual_seed(0)
    m = LuongAttention(4, 4, score=score, scale=True).double()
    q, k = torch.randn(1, 2, 4, dtype=torch.float64), torch.randn(1, 5, 4, dtype=torch.float64)
    with attnlab.trace() as t:
        _, w = m(q, k, need_weights=True)
    kk = k[0].numpy() if score == "dot" else k[0].numpy() @ m.weight.weight.detach().numpy().T
    e = q[0].numpy() @ kk.T
    np.testing.assert_allclose(t["scores"].value[0].numpy(), e, atol=1e-12)
    np.testing.assert_allclose(t["scaled_scores"].value[0].numpy(), e / 2.0, atol=1e-12)  # √d_k = √4 = 2
    a = np.exp(e / 2.0 - (e / 2.0).max(-1, keepdims=True))
    np.testing.assert_allclose(w[0].detach().numpy(), a / a.sum(-1, keepdims=True), atol=1e-12)
    assert t["scaled_scores"].formula == "e_ij · 0.5  (= 1/√d_k)"


def test_unscaled_scores_record_no_scaled_step():
    m = LuongAttention(4, 4, score="dot")
    with attnlab.trace() as t:
        m(torch.randn(1, 2, 4), torch.randn(1, 3, 4))
    assert "scores" in t and "scaled_scores" not in t


# ---- Luong's traced scale step ------------------------------------------------------------------------

def test_traced_luong_scale_step_carries_its_latex():
    m = LuongAttention(4, 4, score="dot", scale=True)
    with attnlab.trace() as t:
        m(torch.randn(1, 2, 4), torch.randn(1, 3, 4))
    assert t["scaled_scores"].latex == r"e_{ij} / \sqrt{d_k}"
