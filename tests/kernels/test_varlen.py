"""Packed sequences: ``patterns.documents`` and ``varlen_attention`` against the padded batch of the same
documents (values and gradients) and a float64 reference written here."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import patterns
from attnlab.kernels import plan
from attnlab.kernels.lse import attention_lse
from attnlab.kernels.partial import merge
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


# Packed documents (``varlen_attention``, ``lengths_of``) and the (output, lse) helpers (``attention_lse``,
# ``merge``): argument checks word for word, and values against float64 NumPy written here from the equations
#
#     o_i = Σ_{j : doc(j) = doc(i)} softmax_j(q_i·k_j · scale) v_j,   ℓ_i = log Σ_j exp(s_ij),
#     merge: ℓ = log Σ_p exp ℓ_p,  o = Σ_p exp(ℓ_p − ℓ) o_p.
CU_MESSAGE = "cu_seqlens must be non-decreasing integers starting at 0, [0, l_1, l_1 + l_2, …, total]; got {}"


def np_packed(q, k, v, lengths, scale):
    """Loop over documents: (total, h, d) float64 → (total, h, d_v)."""
    out = np.zeros(q.shape[:2] + v.shape[2:])
    start = 0
    for ell in lengths:
        sl = slice(start, start + ell)
        for h in (range(q.shape[1]) if ell else ()):
            s = scale * q[sl, h] @ k[sl, h].T
            e = np.exp(s - s.max(-1, keepdims=True))
            out[sl, h] = (e / e.sum(-1, keepdims=True)) @ v[sl, h]
        start += ell
    return out


@pytest.mark.parametrize("cu, shown", [([], "[]"), ([0.0, 2.0], "[0.0, 2.0]"), ([0, 3, 2], "[0, 3, 2]"),
                                       ([0, 2, 5, 4], "[0, 2, 5, 4]")])
def test_lengths_of_refuses_empty_float_and_decreasing_boundaries(cu, shown):
    with pytest.raises(ValueError, match=re.escape(CU_MESSAGE.format(shown))):
        lengths_of(torch.tensor(cu) if cu else cu)


def test_lengths_of_reads_each_documents_length():
    assert lengths_of([0, 3, 3, 7]) == (3, 0, 4)
    assert lengths_of(torch.tensor([0, 2], dtype=torch.int32)) == (2,)


@pytest.mark.parametrize("bad", ["query", "key", "value"])
def test_varlen_names_the_argument_that_is_not_a_tensor_or_not_three_dimensional(bad):
    q, k, v = (torch.randn(4, 2, 3, dtype=torch.float64) for _ in range(3))
    args = {"query": q, "key": k, "value": v}
    args[bad] = [1.0]
    with pytest.raises(ValueError, match=re.escape(f"{bad} must be a torch.Tensor; got list")):
        varlen_attention(args["query"], args["key"], args["value"], [0, 4])
    args[bad] = torch.randn(4, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape(f"{bad} must have at least 3 dimensions; got shape (4, 6)")):
        varlen_attention(args["query"], args["key"], args["value"], [0, 4])
    args[bad] = torch.randn(1, 4, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=re.escape(f"{bad} must be packed (total, h, d); got shape (1, 4, 2, 3)")):
        varlen_attention(args["query"], args["key"], args["value"], [0, 4])


@pytest.mark.parametrize("shapes", [((4, 2, 3), (4, 1, 3), (4, 1, 5)), ((4, 2, 3), (4, 2, 3), (4, 1, 5)),
                                    ((4, 2, 3), (3, 2, 3), (4, 2, 5)), ((3, 2, 3), (3, 2, 3), (3, 2, 5))])
def test_varlen_refuses_shapes_that_disagree_on_total_or_heads(shapes):
    q, k, v = (torch.randn(*s, dtype=torch.float64) for s in shapes)
    want = (f"query, key (total, h, d) and value (total, h, d_v) must share total = cu_seqlens[-1] = 4 and h; "
            f"got query {tuple(shapes[0])}, key {tuple(shapes[1])}, value {tuple(shapes[2])}").replace(",)", ")")
    with pytest.raises(ValueError, match=re.escape(want)):
        varlen_attention(q, k, v, [0, 1, 4])


@pytest.mark.parametrize("lengths", [(1,), (3, 1, 2), (2, 0, 3)])
def test_varlen_equals_a_per_document_loop_with_a_given_scale_and_gives_no_weights(lengths):
    g = torch.Generator().manual_seed(sum(lengths))
    total = sum(lengths)
    q, k = (torch.randn(total, 2, 3, dtype=torch.float64, generator=g) for _ in range(2))
    v = torch.randn(total, 2, 4, dtype=torch.float64, generator=g)
    cu = [0, *np.cumsum(lengths).tolist()]
    out, w = varlen_attention(q, k, v, cu, scale=0.7)
    assert w is None
    np.testing.assert_allclose(out.numpy(), np_packed(q.numpy(), k.numpy(), v.numpy(), lengths, 0.7), atol=1e-12)
    out_w, w = varlen_attention(q, k, v, torch.tensor(cu), scale=0.7, need_weights=True)
    np.testing.assert_allclose(out_w.numpy(), np_packed(q.numpy(), k.numpy(), v.numpy(), lengths, 0.7), atol=1e-12)
    assert w is not None and w.shape == (2, total, total)


def test_varlen_of_one_token_is_its_value_and_of_no_token_is_empty():
    v = torch.tensor([[[2.0, -1.0]]], dtype=torch.float64)
    out, _ = varlen_attention(torch.ones(1, 1, 3, dtype=torch.float64), torch.ones(1, 1, 3, dtype=torch.float64), v, [0, 1])
    assert out.tolist() == v.tolist()
    out, w = varlen_attention(*(torch.zeros(0, 2, 3) for _ in range(3)), [0])
    assert out.shape == (0, 2, 3) and w is None


# ---- attention_lse -------------------------------------------------------------------------------------------


def np_lse(q, k, allow, scale):
    s = np.where(allow, scale * q @ k.T, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = np.exp(s - m).sum(-1)
    return np.where(z > 0, np.log(np.where(z > 0, z, 1.0)) + m[:, 0], -np.inf)


def test_attention_lse_with_one_feature_and_the_message_for_none():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(3, 1, dtype=torch.float64, generator=g) for _ in range(3))
    out, lse = attention_lse(q, k, v)
    np.testing.assert_allclose(lse.numpy(), np_lse(q.numpy(), k.numpy(), True, 1.0), atol=1e-12)
    with pytest.raises(ValueError, match=re.escape("query and key need at least one feature (d >= 1); got query (2, 3, 0)")):
        attention_lse(torch.zeros(2, 3, 0), torch.zeros(2, 3, 0), torch.zeros(2, 3, 1))


def test_attention_lse_is_nan_only_on_rows_that_may_attend_a_non_finite_key():
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(3, 2, dtype=torch.float64, generator=g) for _ in range(3))
    k[2, 0] = float("inf")  # key 2 is not finite, its value is
    allow = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 0]], dtype=torch.bool)
    _, lse = attention_lse(q, k, v, allow, scale=0.5)
    want = np_lse(q.numpy(), k.numpy(), allow.numpy(), 0.5)
    assert torch.isnan(lse[1])
    np.testing.assert_allclose(lse[[0, 2]].numpy(), want[[0, 2]], atol=1e-12)


# ---- merge ---------------------------------------------------------------------------------------------------


def test_merge_names_the_shapes_that_disagree():
    with pytest.raises(ValueError, match=re.escape(
            "each lse must be its output's shape without the last axis; got (2, 3, 4) and (2, 4)")):
        merge([(torch.zeros(2, 3, 4), torch.zeros(2, 4))])


def test_merge_ignores_a_parts_output_where_its_row_has_no_key():
    o1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    o2 = torch.tensor([[float("nan"), float("inf")], [5.0, 6.0]], dtype=torch.float64)
    l1 = torch.tensor([0.5, 1.0], dtype=torch.float64)
    l2 = torch.tensor([float("-inf"), 1.0], dtype=torch.float64)
    out, lse = merge([(o1, l1), (o2, l2)])
    np.testing.assert_allclose(out.numpy(), [[1.0, 2.0], [4.0, 5.0]], atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), [0.5, 1.0 + np.log(2.0)], atol=1e-12)
