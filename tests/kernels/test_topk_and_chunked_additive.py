"""Top-k attention and the chunked additive scores: values, gradients, chunk sizes and messages.

References, all written here: the top-k choice from float64 NumPy (argsort of q·kᵀ·scale among the allowed
keys), attention over the chosen keys as a float64 softmax written out (its gradients by autograd on that
formula), Bahdanau's e_ij = vᵀ tanh(a_i + b_j) and its hand-derived gradients in float64 NumPy
(∂e/∂v = Σ g u, ∂e/∂a_i = v ⊙ Σ_j g_ij (1 − u_ij²), ∂e/∂b_j = v ⊙ Σ_i g_ij (1 − u_ij²)), the chunk sizes
worked out by hand from the documented budget rule, error messages written out word for word.
"""

import math
import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.kernels import top_k, topk_attention
from attnlab.kernels.chunked_additive import (
    SMALL_ELEMS,
    ChunkedAdditive,
    _chunk,
    chunked_additive_scores,
)
from attnlab.kernels.topk import TopK

# --- top-k ------------------------------------------------------------------------------------------


def np_topk_keep(q, k, kk, scale, allow=None):
    """(…, nq, nk) bool: each row's kk highest scale·q·kᵀ among the allowed keys (float64 NumPy)."""
    s = scale * q @ np.swapaxes(k, -1, -2)
    ok = np.ones(s.shape, dtype=bool) if allow is None else np.broadcast_to(allow, s.shape)
    s = np.where(ok, s, -np.inf)
    order = np.argsort(-s, axis=-1, kind="stable")[..., :kk]
    keep = np.zeros(s.shape, dtype=bool)
    np.put_along_axis(keep, order, True, axis=-1)
    return keep & ok


def dense_reference(q, k, v, keep, scale):
    """Softmax attention over the kept keys, written out in float64 (a row with no key gives zeros)."""
    keep = torch.as_tensor(keep)
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    w = torch.where(z > 0, e / torch.where(z > 0, z, torch.ones_like(z)), torch.zeros_like(e))
    return w @ v


def _leaves(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=torch.float64, generator=g).requires_grad_() for s in shapes]


def _check_against_reference(q, k, v, keep, scale, out):
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    want = dense_reference(q2, k2, v2, keep, scale)
    torch.testing.assert_close(out, want, atol=1e-10, rtol=1e-10)
    g = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    got = torch.autograd.grad(out, (q, k, v), g)
    ref = torch.autograd.grad(want, (q2, k2, v2), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


TOPK_CASES = {
    # name: (q shape, k shape, v shape, k, scale, base pattern, padding (shape, dead batch) or None)
    "4d_k3_default_scale": ((2, 2, 7, 4), (2, 2, 7, 4), (2, 2, 7, 3), 3, None, None, None),
    "k_above_n_given_scale": ((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), 9, 0.6, None, None),
    "causal_base_fewer_than_k": ((2, 1, 6, 3), (2, 1, 6, 3), (2, 1, 6, 2), 3, 0.8, P.causal(), None),
    "padding_and_a_dead_batch": ((2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 5), 2, None, None, True),
    "broadcast_leads": ((2, 1, 6, 4), (1, 3, 6, 4), (1, 1, 6, 2), 2, None, None, None),
    "3d_more_keys_than_queries": ((2, 4, 3), (2, 7, 3), (2, 7, 5), 3, None, None, None),
    "2d": ((5, 4), (5, 4), (5, 3), 2, None, P.sliding_window(2, 1), None),
    "large_scale": ((1, 1, 6, 4), (1, 1, 6, 4), (1, 1, 6, 3), 2, 3.0, None, None),
}


@pytest.mark.parametrize("case", list(TOPK_CASES))
def test_topk_attention_and_its_gradients_against_a_float64_topk_softmax(case):
    qs, ks, vs, kk, scale, base, pad = TOPK_CASES[case]
    q, k, v = _leaves(qs, ks, vs, seed=len(case))
    nq, nk, d = qs[-2], ks[-2], qs[-1]
    s = 1 / math.sqrt(d) if scale is None else scale
    allow = np.ones((nq, nk), dtype=bool)
    if base is not None:
        allow = base.allows(torch.arange(nq)[:, None], torch.arange(nk)[None, :], nk).numpy()
    kpm = None
    if pad:
        real = np.ones((qs[0], 1, nk), dtype=bool)
        real[0, 0, [1, 4]] = False
        real[1] = False  # every key of batch 1 padded: its rows have no key
        kpm = torch.from_numpy(real)
        allow = allow & real[:, :, None, :]
    keep = np_topk_keep(q.detach().numpy(), k.detach().numpy(), kk, s, allow)
    topk = TopK(kk, base) if (base is not None or kk != 3) else kk  # an int is taken as TopK(k)
    out = topk_attention(q, k, v, topk, scale=scale, mask=kpm)
    assert out.shape == torch.broadcast_shapes(qs[:-2], ks[:-2], vs[:-2]) + (nq, vs[-1])
    _check_against_reference(q, k, v, keep, s, out)
    if pad:
        assert bool((out[1] == 0).all())


@pytest.mark.parametrize("scale", [None, 0.5, 3.0])
def test_topk_mask_is_the_float64_choice_for_2d_3d_and_4d_inputs(scale):
    g = torch.Generator().manual_seed(5)
    for shape_q, shape_k in [((5, 3), (6, 3)), ((2, 4, 3), (2, 7, 3)), ((1, 2, 5, 4), (1, 2, 5, 4))]:
        q = torch.randn(*shape_q, dtype=torch.float64, generator=g)
        k = torch.randn(*shape_k, dtype=torch.float64, generator=g)
        s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        got = top_k(2).mask(q, k, scale=scale)
        assert got.dtype == torch.bool
        np.testing.assert_array_equal(got.numpy(), np_topk_keep(q.numpy(), k.numpy(), 2, s))


def test_topk_mask_leaves_padded_keys_and_keys_outside_the_base_out():
    g = torch.Generator().manual_seed(6)
    q, k = (torch.randn(2, 1, 6, 3, dtype=torch.float64, generator=g) for _ in range(2))
    real = torch.ones(2, 1, 6, dtype=torch.bool)
    real[0, 0, 2] = real[1, 0, 5] = False
    base = P.sliding_window(2, 0)
    allow = base.materialize(6).numpy() & real.numpy()[:, :, None, :]
    got = TopK(3, base).mask(q, k, mask=real)
    np.testing.assert_array_equal(got.numpy(), np_topk_keep(q.numpy(), k.numpy(), 3, 1 / math.sqrt(3), allow))


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "3"])
def test_topk_refuses_a_k_that_is_not_a_positive_integer_word_for_word(bad):
    with pytest.raises(ValueError, match=re.escape(f"k must be an integer >= 1; got {bad!r}")):
        TopK(bad)


def test_topk_of_one_keeps_the_single_best_key_and_top_k_keeps_its_arguments():
    base = P.causal()
    t = top_k(1, within=base)
    assert t.k == 1 and t.base is base
    assert top_k(4).k == 4 and top_k(4).base is None
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    k = torch.tensor([[0.0, 2.0], [3.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    assert top_k(1).mask(q, k).tolist() == [[False, True, False], [True, False, False]]


# --- chunked additive scores ------------------------------------------------------------------------


def np_additive(a, b, v, g):
    """scores e (B, q, k) and the gradients of Σ g·e with respect to a, b, v (float64 NumPy)."""
    u = np.tanh(a[:, :, None, :] + b[:, None, :, :])  # (B, q, k, d)
    e = u @ v
    w = g[..., None] * (1 - u**2) * v  # (B, q, k, d)
    return e, w.sum(2), w.sum(1), (g[..., None] * u).sum((0, 1, 2))


@pytest.mark.filterwarnings("error")  # e.g. torch's "An output with one or more elements was resized"
@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("needs", ["abv", "a", "b", "v", "av", "bv"])
def test_chunked_additive_function_and_each_gradient_subset_against_numpy(chunk, needs):
    gen = torch.Generator().manual_seed(chunk)
    a = torch.randn(2, 5, 4, dtype=torch.float64, generator=gen)
    b = torch.randn(2, 3, 4, dtype=torch.float64, generator=gen)
    v = torch.randn(4, dtype=torch.float64, generator=gen)
    g = torch.randn(2, 5, 3, dtype=torch.float64, generator=gen)
    want_e, want_a, want_b, want_v = np_additive(a.numpy(), b.numpy(), v.numpy(), g.numpy())
    ins = {"a": a.requires_grad_("a" in needs), "b": b.requires_grad_("b" in needs), "v": v.requires_grad_("v" in needs)}
    e = ChunkedAdditive.apply(a, b, v, chunk)
    np.testing.assert_allclose(e.detach().numpy(), want_e, atol=1e-12)
    got = torch.autograd.grad(e, [ins[x] for x in needs], g)
    want = {"a": want_a, "b": want_b, "v": want_v}
    for x, gr in zip(needs, got):
        np.testing.assert_allclose(gr.numpy(), want[x], atol=1e-12)


@pytest.mark.parametrize("chunk", [2, 4])
def test_chunked_additive_second_backward_recomputes_the_same_gradients(chunk):
    gen = torch.Generator().manual_seed(11)
    a, b = torch.randn(1, 5, 3, dtype=torch.float64, generator=gen), torch.randn(1, 4, 3, dtype=torch.float64, generator=gen)
    v, g = torch.randn(3, dtype=torch.float64, generator=gen), torch.randn(1, 5, 4, dtype=torch.float64, generator=gen)
    want = np_additive(a.numpy(), b.numpy(), v.numpy(), g.numpy())[1:]
    a, b, v = (t.requires_grad_() for t in (a, b, v))
    e = ChunkedAdditive.apply(a, b, v, chunk)
    for _ in range(2):  # the first backward uses (and spends) the kept last block, the second recomputes it
        got = torch.autograd.grad(e, (a, b, v), g, retain_graph=True)
        for x, w in zip(got, want):
            np.testing.assert_allclose(x.numpy(), w, atol=1e-12)


def test_chunked_additive_scores_take_a_non_contiguous_output_gradient():
    gen = torch.Generator().manual_seed(12)
    a = torch.randn(2, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(2, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(3, dtype=torch.float64, generator=gen, requires_grad=True)
    gt = torch.randn(2, 4, 4, dtype=torch.float64, generator=gen)
    e = chunked_additive_scores(a, b, v, chunk=3)
    (e * gt.transpose(1, 2).contiguous().transpose(1, 2)).sum().backward()  # a plain product: g = gt
    _, wa, wb, wv = np_additive(a.detach().numpy(), b.detach().numpy(), v.detach().numpy(), gt.numpy())
    np.testing.assert_allclose(a.grad.numpy(), wa, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), wb, atol=1e-12)
    np.testing.assert_allclose(v.grad.numpy(), wv, atol=1e-12)
    # an upstream gradient that is itself a non-contiguous view
    a.grad = b.grad = v.grad = None
    e = chunked_additive_scores(a, b, v, chunk=3)
    e.backward(gt.transpose(1, 2).contiguous().transpose(1, 2))
    np.testing.assert_allclose(a.grad.numpy(), wa, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), wb, atol=1e-12)


@pytest.mark.parametrize(
    "qs, ks",
    [((5, 4), (3, 4)), ((2, 5, 4), (3, 4)), ((2, 3, 5, 4), (2, 3, 6, 4)), ((2, 1, 5, 4), (1, 3, 6, 4)), ((3, 5, 4), (1, 2, 4)),
     ((2, 5, 4), (2, 2, 6, 4)), ((2, 2, 5, 4), (2, 2, 2, 6, 4))],  # keys with more batch dims than the query
)
@pytest.mark.parametrize("chunk", [None, 2])
def test_chunked_additive_scores_broadcast_leading_dims_against_numpy(qs, ks, chunk):
    gen = torch.Generator().manual_seed(sum(qs) + sum(ks))
    a = torch.randn(*qs, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(*ks, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(4, dtype=torch.float64, generator=gen, requires_grad=True)
    e = chunked_additive_scores(a, b, v, chunk=chunk)
    an, bn = a.detach().numpy(), b.detach().numpy()
    want = np.tanh(an[..., :, None, :] + bn[..., None, :, :]) @ v.detach().numpy()
    assert e.shape == want.shape
    np.testing.assert_allclose(e.detach().numpy(), want, atol=1e-12)
    g = torch.randn(e.shape, dtype=torch.float64, generator=gen)
    got = torch.autograd.grad(e, (a, b, v), g)
    a2, b2, v2 = (t.detach().clone().requires_grad_() for t in (a, b, v))
    ref = torch.autograd.grad(torch.tanh(a2.unsqueeze(-2) + b2.unsqueeze(-3)) @ v2, (a2, b2, v2), g)
    for x, y in zip(got, ref):
        torch.testing.assert_close(x, y, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    "qs, ks, out",
    [((0, 3), (4, 3), (0, 4)), ((5, 3), (0, 3), (5, 0)), ((2, 0, 3), (2, 4, 3), (2, 0, 4)),
     ((0, 5, 3), (0, 4, 3), (0, 5, 4)), ((2, 2, 5, 3), (2, 2, 0, 3), (2, 2, 5, 0))],
)
def test_chunked_additive_scores_of_empty_inputs_are_empty_and_on_the_graph(qs, ks, out):
    a = torch.randn(*qs, requires_grad=True)
    b = torch.randn(*ks, requires_grad=True)
    v = torch.randn(3, requires_grad=True)
    e = chunked_additive_scores(a, b, v)
    assert e.shape == out
    e.sum().backward()
    assert a.grad is not None and a.grad.shape == a.shape and bool((a.grad == 0).all())


def test_chunked_additive_scores_name_each_bad_argument_word_for_word():
    a, b, v = torch.randn(2, 3), torch.randn(4, 3), torch.randn(3)
    cases = [
        ((a, torch.randn(3), v), "projected_keys must have at least 2 dimensions; got shape (3)"),
        (([[1.0]], b, v), "projected_query must be a torch.Tensor; got list"),
        ((a, (1,), v), "projected_keys must be a torch.Tensor; got tuple"),
        ((a, b, torch.tensor(1.0)), "v must have at least 1 dimensions; got shape ()"),
        ((a, b, 3), "v must be a torch.Tensor; got int"),
        ((torch.randn(2, 4), b, v), "projected_query must end in d_a=3 (the size of v); got shape (2, 4)"),
        ((a, torch.randn(4, 2), v), "projected_keys must end in d_a=3 (the size of v); got shape (4, 2)"),
        ((torch.randn(3, 2, 3), torch.randn(2, 4, 3), v),
         "batch dimensions (all but the last two) do not broadcast: projected_query (3, 2, 3), projected_keys (2, 4, 3)"),
    ]
    for args, msg in cases:
        with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
            chunked_additive_scores(*args)
    with pytest.raises(ValueError, match="^" + re.escape("chunk must be >= 1; got 0") + "$"):
        chunked_additive_scores(a, b, v, chunk=0)
    with pytest.raises(ValueError, match="^" + re.escape("max_elems must be >= 1; got 0") + "$"):
        chunked_additive_scores(a, b, v, max_elems=0)


def test_chunked_additive_scores_accept_a_batch_whose_length_equals_d_a():
    # (3, 5, 3): the batch size equals d_a, the query length does not; keys (5, 3) broadcast over the batch
    gen = torch.Generator().manual_seed(13)
    a, b = torch.randn(3, 5, 3, dtype=torch.float64, generator=gen), torch.randn(5, 3, dtype=torch.float64, generator=gen)
    v = torch.randn(3, dtype=torch.float64, generator=gen)
    e = chunked_additive_scores(a, b, v, chunk=1, max_elems=1)
    np.testing.assert_allclose(e.numpy(), np.tanh(a.numpy()[:, :, None] + b.numpy()[None, None]) @ v.numpy(), atol=1e-12)


@pytest.mark.parametrize(
    "args, want",
    [
        # (b, q, k, d_a, chunk, max_elems) → queries per block, worked out by hand:
        ((1, 10, 1, 1, 3, 1), 3),  # a given chunk is used as given
        ((1, 10, 1, 1, 1, 1), 1),
        ((2, 10, 3, 4, None, 2**26), 10),  # small problem: one block
        ((2, 10, 3, 4, None, 72), 3),  # 24 per query: 72 → 3 queries, 4 blocks of ⌈10/4⌉ = 3
        ((2, 10, 3, 4, None, 100), 4),  # 100 // 24 = 4 → 3 blocks → ⌈10/3⌉ = 4
        ((2, 10, 3, 4, None, 170), 5),  # 170 // 24 = 7 → 2 blocks → evened out to 5
        ((2, 10, 3, 4, None, 1), 1),  # budget below one query: one query per block
        ((1, 10, 1, 1, None, 3), 3),  # 1 element per query: 3 → 4 blocks → ⌈10/4⌉ = 3
        ((1, 1001, 100, 64, None, 2**26), 201),  # big: a quarter of 6 406 400 → 250 → 5 blocks → 201
        ((1, 1000, 100, 64, None, 2**20), 143),  # big, budget 2**20 → 163 queries → 7 blocks → ⌈1000/7⌉ = 143
        ((1, SMALL_ELEMS, 1, 1, None, 2**26), SMALL_ELEMS),  # exactly the small size: still one block
        ((1, SMALL_ELEMS + 4, 1, 1, None, 2**26), (SMALL_ELEMS + 4) // 4),  # just above: quarters
    ],
)
def test_chunk_size_follows_the_documented_budget(args, want):
    got = _chunk(*args)
    assert got == want and type(got) is int


@pytest.mark.parametrize("chunk", [2, None])  # several blocks, one block (written with out=)
def test_chunked_additive_scores_cast_under_cpu_autocast(chunk):
    gen = torch.Generator().manual_seed(14)
    a, b, v = torch.randn(2, 5, 4, generator=gen), torch.randn(2, 3, 4, generator=gen), torch.randn(4, generator=gen)
    want = np.tanh(a.double().numpy()[:, :, None] + b.double().numpy()[:, None]) @ v.double().numpy()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        e = chunked_additive_scores(a, b, v, chunk=chunk)
    assert e.dtype == torch.bfloat16
    np.testing.assert_allclose(e.float().numpy(), want, atol=0.1)


@pytest.mark.parametrize(
    "qs, ks, vs, out",
    [
        ((2, 1, 0, 4), (1, 3, 5, 4), (1, 1, 5, 2), (2, 3, 0, 2)),  # no queries: the broadcast leads kept
        ((1, 3, 4, 4), (2, 1, 0, 4), (1, 1, 0, 2), (2, 3, 4, 2)),  # no keys: zero rows
        ((3, 0, 4), (3, 5, 4), (3, 5, 2), (3, 0, 2)),  # 3-D, no queries
        ((3, 4, 4), (1, 0, 4), (1, 0, 6), (3, 4, 6)),  # 3-D, no keys
        ((0, 4), (0, 4), (0, 3), (0, 3)),  # 2-D
    ],
)
def test_topk_with_nothing_to_choose_gives_zeros_of_the_broadcast_shape_and_zero_gradients(qs, ks, vs, out):
    q, k, v = _leaves(qs, ks, vs, seed=3)
    got = topk_attention(q, k, v, 2)
    assert got.shape == out and bool((got == 0).all())
    got.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and bool((t.grad == 0).all())


def test_topk_with_a_single_key_gives_its_value_to_every_query():
    q, k, v = _leaves((1, 2, 3, 2), (1, 2, 1, 2), (1, 2, 1, 3), seed=4)
    got = topk_attention(q, k, v, 2)
    torch.testing.assert_close(got, v.detach().expand(1, 2, 3, 3), atol=1e-12, rtol=0)


def test_topk_with_no_features_is_refused_as_in_the_core():
    # d = 0: no score to rank the keys by (and 1/sqrt(d) does not exist): the core's rule, d >= 1
    q, k = torch.zeros(2, 3, 0, dtype=torch.float64), torch.zeros(2, 4, 0, dtype=torch.float64)
    v = torch.randn(2, 4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for scale in (None, 1.0):
        with pytest.raises(ValueError, match=re.escape("query must have at least one feature (d >= 1); got shape (2, 3, 0)")):
            topk_attention(q, k, v, 4, scale=scale)


def _block_used(out):
    """The queries per block of the ChunkedAdditive node behind ``out`` (its saved ``chunk``)."""
    node = out.grad_fn
    while "ChunkedAdditive" not in type(node).__name__:
        node = node.next_functions[0][0]
    return node.chunk


@pytest.mark.parametrize("qs, ks", [((2, 10, 4), (2, 3, 4)), ((2, 1, 10, 4), (1, 1, 3, 4))])
def test_chunked_additive_scores_use_the_given_chunk_or_the_budget_of_max_elems(qs, ks):
    a = torch.randn(*qs, requires_grad=True)
    b, v = torch.randn(*ks), torch.randn(4)
    assert _block_used(chunked_additive_scores(a, b, v, chunk=3)) == 3
    assert _block_used(chunked_additive_scores(a, b, v, chunk=7, max_elems=1)) == 7  # a given chunk wins
    # 2 · 3 · 4 = 24 elements per query: max_elems 72 → 3 queries, 4 blocks of ⌈10/4⌉ = 3
    assert _block_used(chunked_additive_scores(a, b, v, max_elems=72)) == 3
    assert _block_used(chunked_additive_scores(a, b, v)) == 10  # small: one block


def test_topk_with_no_keys_gives_zero_rows_even_for_a_non_finite_or_overflowing_query():
    # as attnlab.attention: a row with no key gives zeros, whatever its query holds (before: NaN rows)
    q = torch.tensor([[[[float("inf"), 0.0], [3e38, 3e38], [float("nan"), 1.0]]]], requires_grad=True)
    k, v = torch.zeros(1, 1, 0, 2, requires_grad=True), torch.zeros(1, 1, 0, 3, requires_grad=True)
    out = topk_attention(q, k, v, 2)
    assert out.shape == (1, 1, 3, 3) and bool((out == 0).all())
    out.sum().backward()
    assert bool((q.grad == 0).all())
