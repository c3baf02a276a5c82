"""Packed documents (``varlen_attention``, ``lengths_of``) and the (output, lse) helpers (``attention_lse``,
``merge``): argument checks word for word, and values against float64 NumPy written here from the equations

    o_i = Σ_{j : doc(j) = doc(i)} softmax_j(q_i·k_j · scale) v_j,   ℓ_i = log Σ_j exp(s_ij),
    merge: ℓ = log Σ_p exp ℓ_p,  o = Σ_p exp(ℓ_p − ℓ) o_p.
"""

import re

import numpy as np
import pytest
import torch

from attnlab.kernels.lse import attention_lse
from attnlab.kernels.partial import merge
from attnlab.kernels.varlen import lengths_of, varlen_attention

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
