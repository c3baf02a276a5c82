"""Luong's attentional output s̃_t = tanh(W_c [c_t; s_t] + b_c): values against NumPy, the traced steps, the errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional.attentional import attentional_output

RNG = np.random.default_rng(11)


def np_attentional(c: np.ndarray, s: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """Eq. (5) of Luong et al. 2015, row by row in float64: the context first, then the state."""
    out = np.empty(c.shape[:-1] + (w.shape[0],))
    for idx in np.ndindex(*c.shape[:-1]):
        pre = w @ np.concatenate([c[idx], s[idx]])
        out[idx] = np.tanh(pre + (0.0 if b is None else b))
    return out


@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_attentional_output_equals_tanh_of_wc_times_context_then_state(lead: tuple[int, ...], with_bias: bool) -> None:
    c, s = RNG.normal(size=(*lead, 2)), RNG.normal(size=(*lead, 3))
    w, b = RNG.normal(size=(4, 5)), (RNG.normal(size=4) if with_bias else None)
    got = attentional_output(torch.tensor(c), torch.tensor(s), torch.tensor(w), None if b is None else torch.tensor(b))
    np.testing.assert_allclose(got.numpy(), np_attentional(c, s, w, b), rtol=1e-12, atol=1e-15)


def test_attentional_output_records_its_three_steps_with_formulas_and_values() -> None:
    c, s, w, b = RNG.normal(size=(3, 2)), RNG.normal(size=(3, 3)), RNG.normal(size=(4, 5)), RNG.normal(size=4)
    with attnlab.trace() as tr:
        attentional_output(*(torch.tensor(a) for a in (c, s, w, b)))
    assert [(st.name, st.formula, st.latex) for st in tr] == [
        ("context_state", "[c_t; s_t]", "[c_t; s_t]"),
        ("output_preactivation", "W_c [c_t; s_t] + b_c", "W_c [c_t; s_t] + b_c"),
        ("output", "s̃_t = tanh(W_c [c_t; s_t] + b_c)", r"\tilde{s}_t = \tanh(W_c [c_t; s_t] + b_c)"),
    ]
    cs = np.concatenate([c, s], axis=-1)
    np.testing.assert_array_equal(tr["context_state"].value.numpy(), cs)
    np.testing.assert_allclose(tr["output_preactivation"].value.numpy(), cs @ w.T + b, rtol=1e-12)
    np.testing.assert_allclose(tr["output"].value.numpy(), np.tanh(cs @ w.T + b), rtol=1e-12)


r = torch.randn


@pytest.mark.parametrize(
    "args, message",
    [
        ((torch.tensor(1.0), r(3), r(2, 4)), "context must have at least 1 dimensions; got shape ()"),
        (([1.0, 2.0], r(3), r(2, 4)), "context must be a torch.Tensor; got list"),
        ((r(2), torch.tensor(1.0), r(2, 4)), "state must have at least 1 dimensions; got shape ()"),
        ((r(2), [1.0], r(2, 4)), "state must be a torch.Tensor; got list"),
        ((r(2, 3), r(3, 3), r(2, 6)), "context and state must share their leading dimensions: context (2, 3), state (3, 3)"),
        ((r(2), r(3), r(5)), "weight must have at least 2 dimensions; got shape (5)"),
        ((r(1, 2, 3), r(1, 2, 4), r(4, 6)), "weight W_c must be (d_out, d_c + d_s) = (·, 3 + 4); got (4, 6)"),
        ((r(2), r(3), r(4, 5, 2)), "weight W_c must be (d_out, d_c + d_s) = (·, 2 + 3); got (4, 5, 2)"),
        ((r(2), r(3), r(4, 5), r(3)), "bias must have shape (4) (b_c, (d_out,)); got (3)"),
        ((r(2), r(3), r(4, 5), r(4, 1)), "bias must have shape (4) (b_c, (d_out,)); got (4, 1)"),
    ],
)
def test_attentional_output_errors_name_the_argument_and_the_shapes(args, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        attentional_output(*args)
