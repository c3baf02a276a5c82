"""How ring attention cuts a causal block into kernel calls without a dense mask: the runs of
consecutive positions (by hand), and every call together allowing exactly the causal pairs of the
block (against a NumPy mask written here), for the contiguous and zigzag layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.distributed.layout import positions
from attnlab.distributed.ring import _causal_calls, _runs


def test_runs_of_consecutive_positions_by_hand():
    zigzag_rank0 = torch.tensor([0, 1, 2, 3, 12, 13, 14, 15])  # n = 16 over 2 processes
    assert _runs(zigzag_rank0, 1024) == [(0, 4, 0), (4, 4, 12)]
    assert _runs(torch.arange(2, 10), 4) == [(0, 2, 2), (2, 4, 4), (6, 2, 8)]  # cut at the multiples of the tile
    assert _runs(torch.tensor([5, 7, 8]), 1024) == [(0, 1, 5), (1, 2, 7)]
    assert _runs(torch.tensor([], dtype=torch.long), 4) == []


def _union(calls, n_q: int, n_k: int) -> np.ndarray:
    """The pairs the calls allow together (a call without a mask allows its whole rectangle, with
    ``causal`` its lower triangle)."""
    got = np.zeros((n_q, n_k), dtype=int)
    for c in calls:
        r, k = np.arange(n_q)[c.rows], np.arange(n_k)[c.cols]
        if c.mask is not None:
            allow = c.mask.reshape(c.mask.shape[-2:]).numpy()
            allow = np.broadcast_to(allow, (len(r), len(k)))
        elif c.causal:
            allow = np.tril(np.ones((len(r), len(k)), dtype=bool))
        else:
            allow = np.ones((len(r), len(k)), dtype=bool)
        got[np.ix_(r, k)] += allow
    return got


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("q_rank,k_rank", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_the_calls_of_a_block_allow_each_causal_pair_once(monkeypatch, layout, q_rank, k_rank):
    import attnlab.distributed.ring as ring

    monkeypatch.setattr(ring, "TILE", 3)  # several runs per block
    n = 16
    q_pos, k_pos = positions(n, 2, q_rank, layout), positions(n, 2, k_rank, layout)
    got = _union(_causal_calls(q_pos, k_pos, None, "cpu"), len(q_pos), len(k_pos))
    want = (k_pos.numpy()[None, :] <= q_pos.numpy()[:, None]).astype(int)
    np.testing.assert_array_equal(got, want)


def test_a_causal_calls_mask_written_out_lies_on_the_device_asked_for():
    """The explicit path's mask of a ``causal`` call, made on ``meta`` (the proxy for a GPU's queries): made on
    the CPU instead, it would not mix with the queries there. A call with a mask of its own returns that mask."""
    from attnlab.distributed.ring import _Call, _dense

    mask = _dense(_Call(slice(None), slice(None), None, True), 2, 3, torch.device("meta"))
    assert mask.device.type == "meta" and tuple(mask.shape) == (1, 1, 2, 3) and mask.dtype == torch.bool
    np.testing.assert_array_equal(_dense(_Call(slice(None), slice(None), None, True), 2, 3, "cpu")[0, 0].numpy(),
                                  np.tril(np.ones((2, 3), dtype=bool)))
    own = torch.tensor([[True, False]])
    assert _dense(_Call(slice(None), slice(None), own, False), 1, 2, "cpu") is own
