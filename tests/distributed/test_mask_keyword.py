"""Context-parallel attention takes this rank's key mask as ``mask``: bool (b, n/W), True = may attend.

PyTorch's ``key_padding_mask`` (True = padding, the opposite) is not taken: a ``TypeError``.
One gloo process (W = 1), checked against a
float64 NumPy reference written here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.distributed import context_parallel_attention, ring_attention, ulysses_attention
from attnlab.distributed.layout import check_shards

B, H, N, D = 2, 2, 6, 4

ENTRIES = {
    "ring_attention": ring_attention,
    "ulysses_attention": ulysses_attention,
    "context_parallel_attention ring": lambda q, k, v, **kw: context_parallel_attention(q, k, v, mode="ring", **kw)[0],
    "context_parallel_attention ulysses":
        lambda q, k, v, **kw: context_parallel_attention(q, k, v, mode="ulysses", **kw)[0],
}


def _inputs():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, N, D, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(B, N, dtype=torch.bool)
    mask[0, 3:] = False  # the first sequence: its last three keys may not be attended
    return q, k, v, mask


def _reference(q, k, v, mask, causal):
    q, k, v, mask = q.numpy(), k.numpy(), v.numpy(), mask.numpy()
    allowed = mask[:, None, None, :] & (np.tril(np.ones((N, N), dtype=bool)) if causal else True)
    s = np.where(allowed, q @ k.swapaxes(-1, -2) / np.sqrt(D), -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_mask_true_may_attend_matches_float64(one_process_group, entry, causal):
    q, k, v, mask = _inputs()
    got = ENTRIES[entry](q, k, v, mask=mask, causal=causal)
    np.testing.assert_allclose(got.numpy(), _reference(q, k, v, mask, causal), rtol=0, atol=1e-12)


def _check_shards(q, k, v, **kw):
    return check_shards(q, k, v, kw.pop("mask", None), None, None, "contiguous", **kw)


@pytest.mark.parametrize("entry", [*ENTRIES, "check_shards"])
def test_torchs_key_padding_mask_keyword_is_not_taken(entry):
    q, k, v, mask = _inputs()
    call = _check_shards if entry == "check_shards" else ENTRIES[entry]
    with pytest.raises(TypeError) as err:
        call(q, k, v, key_padding_mask=mask)
    assert "unexpected keyword argument 'key_padding_mask'" in str(err.value)


def test_check_shards_takes_the_mask_and_names_it_when_wrong():
    q, k, v, mask = _inputs()
    assert check_shards(q, k, v, mask, 0.5, None, "contiguous") == 0.5
    with pytest.raises(ValueError, match=r"mask must be bool \(b, n/W\) = \(2, 6\), True = may attend \(a real key\)"):
        check_shards(q, k, v, mask[:, :5], None, None, "contiguous")
