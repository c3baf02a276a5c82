"""Packed sequences: ``patterns.documents`` and ``varlen_attention`` against the padded batch of the same
documents (values and gradients) and a float64 reference written here."""

from __future__ import annotations

import math

import pytest
import torch

from attnlab import patterns
from attnlab.kernels import plan
from attnlab.kernels.varlen import lengths_of, varlen_attention

pytestmark = pytest.mark.usefixtures("one_thread")


def padded_reference(q, k, v, lengths, causal):
    """The padded batch (docs, h, max, d) with a key-padding (and causal) mask, softmax written out."""
    out = []
    start = 0
    for n in lengths:
        qq, kk, vv = (t[start : start + n].transpose(0, 1) for t in (q, k, v))  # (h, n, d)
        e = qq @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            e = e.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out.append((torch.softmax(e, -1) @ vv).transpose(0, 1))
        start += n
    return torch.cat(out) if out else v[:0]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths,block", [([5, 17, 1, 30, 0, 9], 8), ([64, 3, 100], 32), ([7], 4)])
def test_packed_equals_padded_values_and_grads(lengths, block, causal):
    torch.manual_seed(0)
    total = sum(lengths)
    q, k, v = (torch.randn(total, 3, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    out, _ = varlen_attention(q, k, v, cu, causal=causal, block=block)
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), (q, k, v))
    ref = padded_reference(q, k, v, lengths, causal)
    ref_grads = torch.autograd.grad((ref * g).sum(), (q, k, v))
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)


def test_padded_batch_through_the_core_matches_too():
    """The same documents as a padded batch through attnlab.attention with a (b, 1, 1, k) padding mask."""
    from attnlab import attention

    torch.manual_seed(1)
    lengths = [4, 9, 2]
    total, L = sum(lengths), max(lengths)
    q, k, v = (torch.randn(total, 2, 8, dtype=torch.float64) for _ in range(3))
    pad = torch.zeros(3, 2, L, 8, dtype=torch.float64)
    qp, kp, vp = pad.clone(), pad.clone(), pad.clone()
    key_mask = torch.zeros(3, L, dtype=torch.bool)
    s = 0
    for i, n in enumerate(lengths):
        for dst, src in ((qp, q), (kp, k), (vp, v)):
            dst[i, :, :n] = src[s : s + n].transpose(0, 1)
        key_mask[i, :n] = True
        s += n
    padded, _ = attention(qp, kp, vp, mask=key_mask[:, None, None, :])
    packed, _ = varlen_attention(q, k, v, [0, 4, 13, 15], block=4)
    s = 0
    for i, n in enumerate(lengths):
        torch.testing.assert_close(packed[s : s + n], padded[i, :, :n].transpose(0, 1))
        s += n


def test_other_documents_never_influence_nan_included_and_weights_path():
    torch.manual_seed(2)
    q, k, v = (torch.randn(12, 2, 4, dtype=torch.float64) for _ in range(3))
    cu = [0, 5, 12]
    base, _ = varlen_attention(q, k, v, cu, block=4)
    k2, v2 = k.clone(), v.clone()
    k2[5:], v2[5:] = float("nan"), float("inf")
    dirty, _ = varlen_attention(q, k2, v2, cu, block=4)
    torch.testing.assert_close(dirty[:5], base[:5])
    slow, w = varlen_attention(q, k, v, cu, need_weights=True)
    torch.testing.assert_close(slow, base)
    assert w.shape == (2, 12, 12) and float(w[:, :5, 5:].abs().sum()) == 0.0
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 12, dtype=torch.float64))
    empty, _ = varlen_attention(q[:0], k[:0], v[:0], [0])
    assert empty.shape == (0, 2, 4)


def test_documents_pattern_allows_and_layout():
    lengths = [3, 0, 6, 2]
    p = patterns.documents(lengths)
    doc = torch.tensor([0] * 3 + [2] * 6 + [3] * 2 + [-1] * 3)  # written by hand; 3 positions past the end
    n = 14
    want = (doc[:, None] == doc[None, :]) & (doc[:, None] >= 0)
    assert torch.equal(p.materialize(n), want)
    assert torch.equal(patterns.documents(lengths, causal=True).materialize(n), want & torch.ones(n, n, dtype=torch.bool).tril())
    for block in (1, 2, 4, 5):
        lay = p.block_layout(n, block)
        nb = -(-n // block)
        padded = torch.zeros(nb * block, nb * block, dtype=torch.bool)
        padded[:n, :n] = want
        tiles = padded.reshape(nb, block, nb, block).any(3).any(1)
        assert bool((lay | ~tiles).all())  # a superset of the non-empty tiles
        assert int(lay.sum()) <= int(tiles.sum()) + nb  # and not much more
        assert plan(p, n, block).nnz_blocks == int(tiles.sum())  # the kernel visits only the documents' tiles
    with pytest.raises(ValueError, match="cu_seqlens"):
        lengths_of([1, 3])
    with pytest.raises(ValueError, match="total"):
        varlen_attention(*(torch.randn(5, 1, 4) for _ in range(3)), [0, 2, 4])
