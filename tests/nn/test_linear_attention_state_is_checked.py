"""LinearAttention's recurrent state: ``empty_state`` takes a batch size >= 0 and a floating dtype, and
a state that does not fit the inputs (another batch, another head size, not a ``LinearState``, another
dtype) is refused with one error naming what was expected and what was given."""

from __future__ import annotations

import pytest
import torch

from attnlab import _checks
from attnlab.functional.linear import LinearState, linear_attention_step
from attnlab.nn import LinearAttention


def _error(call) -> BaseException:
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    return e.value


@pytest.mark.parametrize("batch", [-1, 2.0, "a", True])
def test_empty_state_needs_a_batch_size(batch):
    assert str(_error(lambda: LinearAttention(8, 2).empty_state(batch))) == (
        f"batch must be an integer >= 0; got {batch!r}")


def test_empty_state_needs_a_floating_dtype():
    e = _error(lambda: LinearAttention(8, 2).empty_state(1, dtype=torch.int64))
    assert isinstance(e, _checks.DtypeError)
    assert str(e) == "dtype must be a floating torch.dtype (or None for the module's); got torch.int64"


def test_a_state_that_does_not_fit_is_refused():
    m = LinearAttention(8, 2)
    x = torch.randn(2, 1, 8)
    expected = "state does not fit these inputs: expected S (2, 2, 4, 4) and z (2, 2, 4) of dtype torch.float32; got "
    assert str(_error(lambda: m(x, state=m.empty_state(3)))) == expected + "S (3, 2, 4, 4) and z (3, 2, 4)"
    other = LinearState(torch.zeros(2, 2, 3, 3), torch.zeros(2, 2, 3))
    assert str(_error(lambda: m(x, state=other))) == expected + "S (2, 2, 3, 3) and z (2, 2, 3)"
    e = _error(lambda: m(x, state=(torch.zeros(2, 2, 4, 4), torch.zeros(2, 2, 4))))
    assert isinstance(e, TypeError) and str(e) == (
        "state must be a LinearState (the previous call's, or LinearAttention.empty_state(b)); got tuple")
    e = _error(lambda: m(x, state=m.empty_state(2, dtype=torch.float64)))
    assert isinstance(e, _checks.DtypeError) and str(e) == (
        "state must have the inputs' dtype torch.float32; got S torch.float64, z torch.float64 "
        "(convert with .to(dtype), or start from empty_state(b, dtype=...))")


def test_a_state_that_fits_continues_the_sequence():
    """Two steps from the empty state equal one call over both tokens (the recurrence, computed here)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 2, 3, generator=g, dtype=torch.float64) for _ in range(3))  # (b, h, n, d)
    whole, _ = linear_attention_step(q, k, v)
    first, state = linear_attention_step(q[..., :1, :], k[..., :1, :], v[..., :1, :])
    second, _ = linear_attention_step(q[..., 1:, :], k[..., 1:, :], v[..., 1:, :], state)
    torch.testing.assert_close(torch.cat([first, second], -2), whole)
    phi = lambda t: torch.nn.functional.elu(t) + 1  # noqa: E731
    s = phi(k[..., 0, :, None]) * v[..., 0, None, :] + phi(k[..., 1, :, None]) * v[..., 1, None, :]
    z = phi(k[..., 0, :]) + phi(k[..., 1, :])
    want = (phi(q[..., 1, :, None]) * s).sum(-2) / (phi(q[..., 1, :]) * z).sum(-1, keepdim=True)
    torch.testing.assert_close(second[..., 0, :], want)
