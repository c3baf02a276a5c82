"""Ring attention's forward pass on one rank of a ring of four, simulated in one process: the key/value
blocks are passed on W − 1 times (the last block is not sent again), each rank's queries see every block
once, and the merged output and log-sum-exp equal float64 NumPy attention over the whole sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab.distributed.ring as ring_module
from attnlab.distributed.layout import positions
from attnlab.distributed.ring import _Ring, _ring_forward

from np_reference import attention_lse

W, N, D = 4, 8, 3  # four ranks, eight positions (two each), three features


@pytest.mark.parametrize("rank", [0, 1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_one_rank_passes_the_blocks_on_three_times_and_attends_the_whole_sequence(monkeypatch, rank, causal):
    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(1, 2, N, D, generator=g, dtype=torch.float64) for _ in range(3))
    block = {r: positions(N, W, r) for r in range(W)}
    sent = []

    def rotate_(tensors, group):  # what the previous rank holds now: block (rank − passes) mod W
        sent.append(len(tensors))
        held = block[(rank - len(sent)) % W]
        for t, whole in zip(tensors, (k, v)):
            t.copy_(whole[..., held, :])

    monkeypatch.setattr(ring_module, "rotate_", rotate_)
    ring = _Ring(n=N, size=W, rank=rank, layout="contiguous", pattern=None, causal=causal, scale=0.5, group=None)
    mine = block[rank]
    acc, hit = _ring_forward(q[..., mine, :], k[..., mine, :], v[..., mine, :], None, None, ring)
    assert sent == [2] * (W - 1)  # keys and values, three times: never a fourth pass after the last block
    qi = mine.numpy()
    allow = np.arange(N)[None, :] <= qi[:, None] if causal else np.ones((len(qi), N), dtype=bool)
    heads = [attention_lse(q.numpy()[0, i, qi], k.numpy()[0, i], v.numpy()[0, i], allow, 0.5) for i in range(2)]
    out, lse = np.stack([o for o, _ in heads])[None], np.stack([lo for _, lo in heads])[None]
    np.testing.assert_allclose(acc.out.numpy(), out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(acc.lse.numpy(), lse, rtol=1e-10, atol=1e-12)
    assert not hit.any()  # no non-finite key anywhere
