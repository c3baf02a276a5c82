"""A float bias with ``multi_head_attention`` under CPU autocast: it must have the scores' dtype, which is the
autocast dtype there (the projections run in it). Before the fix every float bias was refused under autocast:
a float32 one by ``attention`` (scores in bfloat16), a bfloat16 one by ``multi_head_attention`` (query in float32)."""

from __future__ import annotations

import re

import pytest
import torch

from attnlab.functional import multihead as mh


def _weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {n: torch.randn(4, 4, generator=g) for n in ("w_q", "w_k", "w_v", "w_o")}


def test_a_bias_in_the_autocast_dtype_is_accepted_and_acts_like_the_float32_bias_outside() -> None:
    x = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(1))
    bias = torch.tensor([[0.0, -1e4, 0.0], [0.0, 0.0, -1e4], [-1e4, 0.0, 0.0]]).view(1, 1, 3, 3)
    w = _weights()
    ref, ref_w = mh.multi_head_attention(x, x, x, w, num_heads=2, mask=bias, need_weights=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, weights = mh.multi_head_attention(x, x, x, w, num_heads=2, mask=bias.bfloat16(), need_weights=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(weights.float(), ref_w, atol=0.03, rtol=0.05)
    assert float(weights[0, :, 0, 1].float().abs().max()) == 0.0  # the -1e4 bias still removes the key


def test_a_bias_of_another_dtype_than_the_query_is_refused_outside_autocast() -> None:
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    w = {n: t.double() for n, t in _weights().items()}
    message = (
        "a float mask (additive bias) must have the scores' dtype torch.float64; got mask dtype torch.float32 "
        "(convert with mask.to(torch.float64), or pass a bool mask)"
    )
    with pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        mh.multi_head_attention(x, x, x, w, num_heads=2, mask=torch.zeros(1, 1, 3, 3))
