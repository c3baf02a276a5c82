"""The gradient of ``masked_softmax`` against its closed form, with a fully masked row (gradient zero there).

    ∂(Σ_j g_j α_j)/∂e_j = α_j (g_j − Σ_j' α_j' g_j')  for the keys j a row may attend, 0 elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.functional.softmax import masked_softmax


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_gradient_of_masked_softmax_with_a_fully_masked_row(kind: str) -> None:
    rng = np.random.default_rng(13)
    e, g = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    allowed = np.array([[True, False, True, True], [False, False, False, False], [True, True, True, False]])
    mask = torch.tensor(allowed) if kind == "bool" else torch.tensor(np.where(allowed, 0.0, -np.inf))
    scores = torch.tensor(e, requires_grad=True)
    w = masked_softmax(scores, mask)
    (w * torch.tensor(g)).sum().backward()
    alpha = np.zeros_like(e)
    grad = np.zeros_like(e)
    for i in range(3):
        if allowed[i].any():
            x = np.exp(np.where(allowed[i], e[i], -np.inf) - e[i][allowed[i]].max())
            alpha[i] = x / x.sum()
            grad[i] = alpha[i] * (g[i] - (alpha[i] * g[i]).sum())
    np.testing.assert_allclose(w.detach().numpy(), alpha, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(scores.grad.numpy(), grad, rtol=1e-10, atol=1e-14)
