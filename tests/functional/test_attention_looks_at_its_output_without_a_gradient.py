"""Without a gradient, the CPU's fast path runs the kernel first and reads only its output: finite
inputs cost no read of query, key or value; a NaN anywhere is caught from the output and the call is
computed again under the non-finite rule, with the rule's numbers (float64 NumPy written here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import attnlab

METADATA = {"dim", "numel", "is_floating_point", "__get__", "size", "stride", "element_size", "is_contiguous",
            "__len__", "requires_grad", "dtype", "device", "shape"}  # (no data read)


class _Calls(TorchFunctionMode):
    def __init__(self, *watched):
        super().__init__()
        self.watched, self.reads, self.kernels = watched, [], 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            self.kernels += 1
        elif any(a is w for a in args for w in self.watched) and getattr(func, "__name__", "") not in METADATA:
            self.reads.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def _np_causal(q, k, v):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    n = s.shape[-1]
    s = np.where(np.tril(np.ones((n, n), dtype=bool)), s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("kw", [{"causal": True}, {"mask": attnlab.Mask.padding([6, 4], 6)}])
def test_finite_inputs_are_not_read_outside_the_kernel(kw):
    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    with torch.no_grad(), _Calls(q, k, v) as calls:
        attnlab.attention(q, k, v, **kw)
    assert calls.kernels == 1 and calls.reads == []


def test_a_nan_in_a_future_value_is_caught_from_the_output_and_guarded():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 1, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    v[0, 0, 4, 1] = float("nan")
    with torch.no_grad(), _Calls(q, k, v) as calls:
        out, _ = attnlab.attention(q, k, v, causal=True)
    assert calls.kernels == 2  # the look at the output found a NaN: computed again under the rule
    clean = np.nan_to_num(v.numpy())
    np.testing.assert_allclose(out[0, 0, :4].numpy(), _np_causal(q.numpy(), k.numpy(), clean)[0, 0, :4], rtol=1e-10)
    assert out[0, 0, 4:].isnan().all()  # the rows that may attend it: NaN, whole rows
