"""How the modules read a short (1-D, 2-D, 3-D) mask (``attnlab.masks.score_mask``).

A 2-D mask is read by its shape: ``(b, k)`` with b != q is key padding, ``(q, k)`` with q != b applies
to every sequence. When b == q the shape fits both readings (row i = sequence i's keys, or query i's
keys), which give different outputs, so it raises instead of guessing. Values are checked against
multi-head attention in float64 NumPy written here (Vaswani et al. 2017, §3.2.2)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import masks
from attnlab.functional.multihead import multi_head_attention
from attnlab.models.transformer import Transformer, TransformerConfig
from attnlab.nn import (
    DifferentialAttention,
    LinearAttention,
    MultiHeadAttention,
    MultiHeadLatentAttention,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def bools(*shape, seed=0):
    m = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < 0.6
    m[..., 0] = True  # every row may attend something
    return m


def np_mha(m, xq, xk, allow):
    """softmax(Q_i K_iᵀ / √d_h, forbidden → −∞) V_i per head, concatenated, W_o; allow (b, 1, q|1, k)."""
    p = {n: None if w is None else w.detach().numpy() for n, w in m.projection_weights().items()}
    q, k, v = (x @ p[w].T + p[bias] for x, w, bias in ((xq, "w_q", "b_q"), (xk, "w_k", "b_k"), (xk, "w_v", "b_v")))
    b, nq, nk, h, d = q.shape[0], q.shape[1], k.shape[1], m.num_heads, m.head_dim
    ok = np.broadcast_to(allow, (b, 1, nq, nk))
    out = np.zeros((b, nq, h * d))
    for bi in range(b):
        for hi in range(h):
            cols = slice(hi * d, (hi + 1) * d)
            e = np.where(ok[bi, 0], q[bi, :, cols] @ k[bi, :, cols].T / math.sqrt(d), -np.inf)
            w = np.exp(e - e.max(-1, keepdims=True))
            out[bi, :, cols] = (w / w.sum(-1, keepdims=True)) @ v[bi, :, cols]
    return out @ m.out_proj.weight.detach().numpy().T + m.out_proj.bias.detach().numpy()


def mha(seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(8, 2, qkv_bias=True).double().eval()


def functional(m, xq, xk, mask):
    """``multi_head_attention`` with the module's weights."""
    return multi_head_attention(xq, xk, xk, m.projection_weights(), num_heads=m.num_heads, mask=mask)[0]


# --- the rule ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("b, q, k", [(3, 3, 5), (2, 2, 2), (4, 4, 1)])
def test_a_2d_mask_that_fits_both_readings_raises_naming_the_shape_and_the_explicit_forms(b, q, k):
    with pytest.raises(ValueError) as e:
        masks.score_mask(torch.ones(b, k, dtype=torch.bool), b, q, k)
    msg = str(e.value)
    assert f"({b}, {k})" in msg and f"b={b}" in msg and f"q={q}" in msg and f"k={k}" in msg
    assert "(b, 1, 1, k)" in msg and "as_key_mask" in msg and "(1, 1, q, k)" in msg and "(b, q, k)" in msg


@pytest.mark.parametrize("given, b, q, k, shape, padding", [
    ((5,), 2, 3, 5, (1, 1, 1, 5), False),  # every query alike
    ((2, 5), 2, 3, 5, (2, 1, 1, 5), True),  # (b, k) padding
    ((3, 5), 2, 3, 5, (1, 1, 3, 5), False),  # (q, k), every sequence
    ((1, 5), 2, 3, 5, (1, 1, 1, 5), False),  # one row for all
    ((1, 5), 1, 1, 5, (1, 1, 1, 5), True),  # b = q = 1: both readings are the same
    ((2, 3, 5), 2, 3, 5, (2, 1, 3, 5), False),  # (b, q, k), every head
    ((2, 1, 1, 5), 2, 2, 5, (2, 1, 1, 5), True),  # explicit padding, even when b = q
    ((1, 1, 2, 5), 2, 2, 5, (1, 1, 2, 5), False),  # explicit (q, k), even when b = q
])
def test_score_mask_reads_each_short_form(given, b, q, k, shape, padding):
    m = bools(*given)
    got, is_padding = masks.score_mask(m, b, q, k)
    assert tuple(got.shape) == shape and is_padding == padding
    assert torch.equal(got.flatten(), m.flatten())  # the same entries, only placed


@pytest.mark.parametrize("shape", [(2, 4), (4, 5), (3, 4)])
def test_score_mask_refuses_a_2d_mask_of_neither_shape(shape):
    with pytest.raises(ValueError, match=re.escape(str(shape)) + r" does not broadcast.*\(b, k\) = \(2, 5\).*\(q, k\) = \(3, 5\)"):
        masks.score_mask(torch.ones(shape, dtype=torch.bool), 2, 3, 5)


# --- values: the module and the function against NumPy --------------------------------------------------


def test_b_k_padding_with_b_not_q_equals_the_explicit_form_and_numpy():
    m, xq, xk = mha(), t(2, 3, 8), t(2, 5, 8, seed=1)
    pad = bools(2, 5, seed=2)
    want = np_mha(m, xq.numpy(), xk.numpy(), pad.numpy()[:, None, None, :])
    for mask in (pad, masks.as_key_mask(pad)):
        np.testing.assert_allclose(m(xq, xk, mask=mask)[0].detach().numpy(), want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(functional(m, xq, xk, mask).detach().numpy(), want, rtol=1e-10, atol=1e-12)


def test_q_k_mask_with_q_not_b_equals_the_explicit_form_and_numpy():
    m, xq, xk = mha(), t(2, 3, 8), t(2, 5, 8, seed=1)
    allow = bools(3, 5, seed=3)
    want = np_mha(m, xq.numpy(), xk.numpy(), allow.numpy()[None, None])
    for mask in (allow, allow[None, None]):
        np.testing.assert_allclose(m(xq, xk, mask=mask)[0].detach().numpy(), want, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(functional(m, xq, xk, mask).detach().numpy(), want, rtol=1e-10, atol=1e-12)


def test_with_b_equal_q_the_module_and_the_function_raise_and_the_explicit_forms_differ():
    m, xq, xk = mha(), t(3, 3, 8), t(3, 5, 8, seed=1)
    rows = bools(3, 5, seed=4)
    for call in (lambda: m(xq, xk, mask=rows), lambda: functional(m, xq, xk, rows)):
        with pytest.raises(ValueError, match=r"\(3, 5\) is ambiguous"):
            call()
    as_padding = m(xq, xk, mask=masks.as_key_mask(rows))[0].detach().numpy()
    per_query = m(xq, xk, mask=rows[None, None])[0].detach().numpy()
    np.testing.assert_allclose(as_padding, np_mha(m, xq.numpy(), xk.numpy(), rows.numpy()[:, None, None, :]),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(per_query, np_mha(m, xq.numpy(), xk.numpy(), rows.numpy()[None, None]),
                               rtol=1e-10, atol=1e-12)
    assert np.abs(as_padding - per_query).max() > 1e-3  # the two readings are different attentions


def test_self_attention_padding_given_explicitly_still_zeroes_padded_queries():
    m, x = mha(), t(3, 3, 8)
    pad = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    y = m(x, mask=masks.as_key_mask(pad))[0].detach().numpy()
    want = np_mha(m, x.numpy(), x.numpy(), pad.numpy()[:, None, None, :])
    want[~pad.numpy()] = 0.0
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)


# --- every self-attention module reads masks the same way ----------------------------------------------


MODULES = {
    "multihead": lambda: MultiHeadAttention(8, 2),
    "latent": lambda: MultiHeadLatentAttention(8, 2, kv_latent_dim=4, head_dim=4, rope_dim=2),
    "differential": lambda: DifferentialAttention(8, 2),
    "linear": lambda: LinearAttention(8, 2),
}


def module(name):
    torch.manual_seed(0)
    return MODULES[name]().double().eval()


@pytest.mark.parametrize("name", MODULES)
def test_every_module_raises_on_an_ambiguous_2d_mask(name):
    with pytest.raises(ValueError, match=r"\(3, 3\) is ambiguous"):
        module(name)(t(3, 3, 8), mask=torch.ones(3, 3, dtype=torch.bool))


@pytest.mark.parametrize("name", MODULES)
def test_every_module_reads_the_short_forms_as_their_explicit_forms(name):
    m, x = module(name), t(2, 4, 8)
    pad, rows, per_seq, keys = bools(2, 4, seed=5), bools(4, 4, seed=6), bools(2, 4, 4, seed=7), bools(4, seed=8)
    for short, explicit in ((pad, masks.as_key_mask(pad)), (rows, rows[None, None]), (per_seq, per_seq[:, None]),
                            (keys, keys[None, None, None])):
        got, want = m(x, mask=short, need_weights=True), m(x, mask=explicit, need_weights=True)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


@pytest.mark.parametrize("name", ["latent", "differential", "linear"])
def test_a_b_q_k_mask_has_its_batch_first_even_when_b_equals_the_heads(name):
    """b = h = 2: a (b, q, k) mask broadcast as (1, b, q, k) would put the batch on the heads."""
    m, x = module(name), t(2, 4, 8)
    allow = torch.ones(2, 4, 4, dtype=torch.bool)
    allow[1] = torch.eye(4, dtype=torch.bool)  # sequence 1: each token attends only itself
    _, w = m(x, mask=allow, need_weights=True)  # (b, h, q, k)
    nonzero = w.detach().abs() > 1e-12
    assert not nonzero[1][:, ~torch.eye(4, dtype=torch.bool)].any()  # sequence 1, every head: the diagonal only
    assert nonzero[0].all()  # sequence 0, every head: every key


def test_the_transformer_takes_its_padding_masks_when_batch_and_lengths_are_equal():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab=11, tgt_vocab=11, dim=16, num_heads=2,
                                          num_encoder_layers=1, num_decoder_layers=1, dropout=0.0)).double().eval()
    src, tgt = torch.randint(1, 11, (4, 4)), torch.randint(1, 11, (4, 4))
    src_mask = torch.tensor([[True] * 4, [True] * 3 + [False], [True] * 2 + [False] * 2, [True] + [False] * 3])
    batched = model(src, tgt, src_mask=src_mask)  # b = s = t = 4
    for i in range(4):  # each sentence alone, without its padding: the same logits
        n = int(src_mask[i].sum())
        alone = model(src[i : i + 1, :n], tgt[i : i + 1])
        torch.testing.assert_close(batched[i : i + 1], alone, rtol=1e-9, atol=1e-9)
