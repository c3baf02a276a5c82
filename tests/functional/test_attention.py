"""attnlab.attention: both paths against the NumPy reference, and the contract."""

from __future__ import annotations

import importlib
import math
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlab

import np_reference as ref

FP32_TOL = dict(rtol=1e-5, atol=1e-5)  # the documented fast-vs-reference tolerance in float32


def t(x, dtype=torch.float64):
    return torch.tensor(x, dtype=dtype)


# ---------------------------------------------------------------- against NumPy


@settings(max_examples=40, deadline=None)
@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    q=st.integers(1, 6),
    k=st.integers(1, 6),
    d=st.integers(1, 5),
    dv=st.integers(1, 4),
    kind=st.sampled_from(["none", "bool", "float", "causal"]),
    score=st.sampled_from(["dot", "scaled_dot"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_both_paths_match_numpy(b, h, q, k, d, dv, kind, score, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(b, h, q, d)), rng.normal(size=(b, h, k, d)), rng.normal(size=(b, h, k, dv))
    mask, allowed, bias = None, None, None
    if kind == "bool":
        allowed = rng.random((b, 1, q, k)) < 0.6
        mask = torch.from_numpy(allowed)
    elif kind == "float":
        bias = rng.normal(size=(q, k))
        bias[rng.random((q, k)) < 0.3] = -np.inf
        mask = torch.from_numpy(bias)
    elif kind == "causal":
        allowed = np.arange(k)[None, :] <= np.arange(q)[:, None] + (k - q)
    fn = ref.dot if score == "dot" else ref.scaled_dot
    want_out, want_w = ref.attention(Q, K, V, fn, allowed=allowed, bias=bias)
    kw = dict(score=score, mask=mask, causal=kind == "causal")
    out, w = attnlab.attention(t(Q), t(K), t(V), need_weights=True, **kw)
    fast, none = attnlab.attention(t(Q), t(K), t(V), **kw)
    assert none is None
    np.testing.assert_allclose(w.numpy(), want_w, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)
    np.testing.assert_allclose(fast.numpy(), want_out, atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(q=st.integers(1, 4), k=st.integers(1, 5), dq=st.integers(1, 4), dk=st.integers(1, 4), seed=st.integers(0, 2**31 - 1))
def test_callable_scores_match_numpy(q, k, dq, dk, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(2, q, dq)), rng.normal(size=(2, k, dk)), rng.normal(size=(2, k, 3))
    Wq, Wk, v, W = rng.normal(size=(3, dq)), rng.normal(size=(3, dk)), rng.normal(size=(3,)), rng.normal(size=(dq, dk))
    allowed = rng.random((2, q, k)) < 0.7
    for fn, rfn in [
        (partial(attnlab.scores.additive, w_q=t(Wq), w_k=t(Wk), v=t(v)), lambda a, b: ref.additive(a, b, Wq, Wk, v)),
        (partial(attnlab.scores.general, weight=t(W)), lambda a, b: ref.general(a, b, W)),
    ]:
        want_out, want_w = ref.attention(Q, K, V, rfn, allowed=allowed)
        out, w = attnlab.attention(t(Q), t(K), t(V), score=fn, mask=torch.from_numpy(allowed), need_weights=True)
        np.testing.assert_allclose(w.numpy(), want_w, atol=1e-12)
        np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)


def test_fast_path_agrees_with_reference_in_float32():
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 33, 16), torch.randn(2, 4, 47, 16), torch.randn(2, 4, 47, 8)
    pad = attnlab.masks.as_key_mask(attnlab.masks.padding([47, 20]))
    for kw in [{}, {"mask": pad}, {"causal": True}, {"mask": pad, "causal": True}, {"score": "dot"}, {"scale": 0.1}]:
        ref_out, _ = attnlab.attention(q, k, v, need_weights=True, **kw)
        fast, _ = attnlab.attention(q, k, v, **kw)
        torch.testing.assert_close(fast, ref_out, **FP32_TOL)


def test_fast_path_runs_sdpa_only_when_weights_are_not_needed(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q = torch.randn(1, 3, 4)
    attnlab.attention(q, q, q)
    assert len(calls) == 1
    attnlab.attention(q, q, q, need_weights=True)
    with attnlab.trace():
        attnlab.attention(q, q, q)
    attnlab.attention(q, q, q, score=attnlab.scores.dot)  # a callable score has no fused kernel
    assert len(calls) == 1


# ------------------------------------------------------------ the tutorials' examples


def test_seed_000_additive_example():
    h = t([[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]])
    s = t([[0.6, -0.2]])
    score = partial(attnlab.scores.additive, w_q=t([[0.1, 0.2], [0.3, 0.4]]), w_k=t([[0.5, 0.6], [0.7, 0.8]]), v=t([1.0, 2.0]))
    with attnlab.trace() as tr:
        c, w = attnlab.attention(s, h, h, score=score, need_weights=True)
    np.testing.assert_allclose(tr["scores"].value[0].numpy(), [1.527, 0.969, 0.880], atol=5e-4)
    np.testing.assert_allclose(w[0].numpy(), [0.477, 0.273, 0.250], atol=5e-4)
    np.testing.assert_allclose(c[0].numpy(), [0.152, 0.366], atol=5e-4)


def test_seed_001_bahdanau_example():
    h, s, eye = t([[1, 2], [3, 4]]), t([[5, 6]]), torch.eye(2, dtype=torch.float64)
    c, w = attnlab.attention(s, h, h, score=partial(attnlab.scores.additive, w_q=eye, w_k=eye, v=t([1, 1])), need_weights=True)
    np.testing.assert_allclose(w[0].numpy(), [0.5, 0.5], atol=1e-4)
    np.testing.assert_allclose(c[0].numpy(), [2, 3], atol=1e-4)


def test_seed_001_dot_and_scaled_dot_example():
    h, s = t([[1, 2], [3, 4]]), t([[5, 6]])
    assert attnlab.scores.dot(s, h)[0].tolist() == [17, 39]
    np.testing.assert_allclose(attnlab.scores.scaled_dot(s, h)[0].numpy(), [12.02, 27.58], atol=5e-3)
    c, w = attnlab.attention(s, h, h, need_weights=True)
    assert float(w[0, 0]) < 1e-6 and float(w[0, 1]) > 1 - 1e-6
    np.testing.assert_allclose(c[0].numpy(), [3, 4], atol=1e-5)


def test_seed_001_self_attention_puts_0880_on_token_5():
    Q = t([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]])
    K = t([[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]])
    V = t([[0, 1], [1, 0], [2, 1], [3, 2], [4, 3]])
    _, w = attnlab.attention(Q, K, V, need_weights=True)
    assert int(w[0].argmax()) == 4  # token 5 ("上"), not token 4 ("垫子") as the text says
    assert round(float(w[0, 4]), 3) == 0.880


# ---------------------------------------------------------------- the contract


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_fully_masked_row_gives_zeros_and_finite_gradients(mask_kind, need_weights):
    torch.manual_seed(0)
    q = torch.randn(2, 2, 4, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    allowed = torch.rand(2, 1, 4, 5) < 0.7
    allowed[:, :, 0] = True
    allowed[1, :, 2] = False  # query 2 of batch 1 may attend nothing
    mask = allowed if mask_kind == "bool" else attnlab.masks.to_bias(allowed, torch.float64)
    out, w = attnlab.attention(q, k, v, mask=mask, need_weights=need_weights)
    assert torch.all(out[1, :, 2] == 0)
    if need_weights:
        assert torch.all(w[1, :, 2] == 0)
        sums = w.sum(-1)
        torch.testing.assert_close(sums[allowed.expand(2, 2, 4, 5).any(-1)], torch.ones_like(sums[allowed.expand(2, 2, 4, 5).any(-1)]))
    out.square().sum().backward()
    for g in (q.grad, k.grad, v.grad):
        assert torch.isfinite(g).all()
    assert torch.all(q.grad[1, :, 2] == 0)


def test_fully_masked_row_from_causal_with_more_queries_than_keys():
    q, k = torch.randn(1, 3, 4), torch.randn(1, 1, 4)
    for nw in (True, False):
        out, _ = attnlab.attention(q, k, k, causal=True, need_weights=nw)
        assert torch.all(out[0, :2] == 0) and torch.allclose(out[0, 2], k[0, 0])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("need_weights", [True, False])
def test_masked_keys_and_values_never_influence_the_output(bad, need_weights):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 5)
    pad = attnlab.masks.as_key_mask(attnlab.masks.padding([7, 4]))
    clean, _ = attnlab.attention(q, k, v, mask=pad, need_weights=need_weights)
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 4:] = bad
    v2[1, :, 4:] = bad
    dirty, _ = attnlab.attention(q, k2, v2, mask=pad, need_weights=need_weights)
    torch.testing.assert_close(dirty, clean, **FP32_TOL)
    # a per-query (causal) mask: the last key is seen only by the last query
    v3 = v.clone()
    v3[..., -1, :] = bad
    out, _ = attnlab.attention(q, k, v3, causal=True, need_weights=need_weights)
    ref_out, _ = attnlab.attention(q, k, v, causal=True, need_weights=True)
    torch.testing.assert_close(out[..., :-1, :], ref_out[..., :-1, :], **FP32_TOL)
    assert not torch.isfinite(out[..., -1, :]).all()  # the query that may attend it does see it


def test_gradients_with_nan_in_masked_values_are_finite():
    q = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 5, 3, dtype=torch.float64)
    v = torch.randn(1, 5, 2, dtype=torch.float64)
    k[0, 3:], v[0, 3:] = float("nan"), float("nan")
    mask = attnlab.masks.padding([3], max_len=5)[:, None, :]
    for nw in (True, False):
        out, _ = attnlab.attention(q, k, v, mask=mask, need_weights=nw)
        (g,) = torch.autograd.grad(out.sum(), q)
        assert torch.isfinite(g).all()


def test_changing_masked_keys_or_values_changes_nothing_random():
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        q, k, v = (torch.randn(2, 2, n, 4, generator=gen) for n in (5, 6, 6))
        allowed = torch.rand(2, 2, 5, 6, generator=gen) < 0.5
        out, w = attnlab.attention(q, k, v, mask=allowed, need_weights=True)
        never = ~allowed.any(-2, keepdim=True).transpose(-1, -2)  # keys no query attends: (b, h, k, 1)
        k2 = torch.where(never, torch.randn(k.shape, generator=gen) * 100, k)
        v2 = torch.where(never, torch.randn(v.shape, generator=gen) * 100, v)
        for nw in (True, False):
            out2, _ = attnlab.attention(q, k2, v2, mask=allowed, need_weights=nw)
            torch.testing.assert_close(out2, out, **FP32_TOL)


def test_weights_are_a_distribution():
    torch.manual_seed(0)
    q, k = torch.randn(3, 2, 7, 5), torch.randn(3, 2, 9, 5)
    allowed = torch.rand(3, 1, 7, 9) < 0.5
    _, w = attnlab.attention(q, k, k, mask=allowed, need_weights=True)
    assert torch.all(w >= 0)
    rows = allowed.expand_as(w).any(-1)
    torch.testing.assert_close(w.sum(-1), rows.to(w.dtype))
    assert torch.all(w[~allowed.expand_as(w)] == 0)


def test_self_attention_is_permutation_equivariant():
    torch.manual_seed(0)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    perm = torch.randperm(6)
    for nw in (True, False):
        out, _ = attnlab.attention(x, x, x, need_weights=nw)
        out_p, _ = attnlab.attention(x[:, perm], x[:, perm], x[:, perm], need_weights=nw)
        torch.testing.assert_close(out_p, out[:, perm])


def test_causal_block_at_the_end_matches_full_recomputation():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4), torch.randn(1, 2, 9, 4)
    full, _ = attnlab.attention(q, k, v, causal=True)
    for nw in (True, False):
        tail, _ = attnlab.attention(q[..., -3:, :], k, v, causal=True, need_weights=nw)
        torch.testing.assert_close(tail, full[..., -3:, :], **FP32_TOL)


def test_softmax_is_stable_for_large_scores():
    s = torch.tensor([[1e4, 1e4 - 1.0, -1e4]])
    w = attnlab.masked_softmax(s)
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w[0, :2], torch.softmax(torch.tensor([1.0, 0.0]), 0))
    q = torch.full((1, 1, 4), 100.0)
    out, w = attnlab.attention(q, q * torch.tensor([[[1.0], ]]), q, need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_runs_in_float32_for_half_inputs(dtype):
    torch.manual_seed(0)
    s = (torch.randn(4, 50) * 30).to(dtype)
    mask = torch.rand(4, 50) < 0.8
    w = attnlab.masked_softmax(s, mask)
    assert w.dtype == dtype
    expected = torch.softmax(s.float().masked_fill(~mask, float("-inf")), -1).to(dtype)
    assert torch.equal(w, expected)
    # half inputs through attention: finite, and close to float32
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    out_h, _ = attnlab.attention(q.to(dtype), k.to(dtype), v.to(dtype), need_weights=True)
    out_f, _ = attnlab.attention(q, k, v)
    torch.testing.assert_close(out_h.float(), out_f, atol=3e-2, rtol=3e-2)


def test_masked_softmax_does_not_write_into_its_input():
    s = torch.randn(3, 4)
    before = s.clone()
    attnlab.masked_softmax(s, torch.rand(3, 4) < 0.5)
    assert torch.equal(s, before)


@pytest.mark.parametrize("path", ["reference", "fast"])
@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal"])
def test_gradcheck(path, kind):
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 5, 3, dtype=torch.float64, requires_grad=True)
    mask = None
    if kind == "bool":
        mask = torch.tensor([[True, False, True, True, False], [False] * 5, [True] * 5])
    elif kind == "float":
        mask = torch.randn(3, 5, dtype=torch.float64)
        mask[1, 0] = float("-inf")
    nw = path == "reference"

    def f(q, k, v):
        return attnlab.attention(q, k, v, mask=mask, causal=kind == "causal", need_weights=nw)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_gradcheck_additive_reference_path():
    torch.manual_seed(0)
    q = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    wq = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    wk = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    vv = torch.randn(6, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, True, False, True], [False] * 4])

    def f(q, k, wq, wk, vv):
        return attnlab.attention(q, k, k, score=partial(attnlab.scores.additive, w_q=wq, w_k=wk, v=vv), mask=mask)[0]

    assert torch.autograd.gradcheck(f, (q, k, wq, wk, vv))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(key=torch.randn(2, 5, 8), value=torch.randn(2, 6, 8)), ["same length", "(2, 5, 8)", "(2, 6, 8)"]),
        (dict(key=torch.randn(2, 5, 7), value=torch.randn(2, 5, 8)), ["feature sizes", "d=8", "d=7"]),
        (dict(mask=torch.ones(3, 5, dtype=torch.bool)), ["(3, 5)", "does not broadcast", "(2, 4, 5)"]),
        (dict(mask=torch.ones(2, 4, 5, dtype=torch.uint8)), ["bool", "torch.uint8"]),
        (dict(mask=torch.ones(2, 4, 5, dtype=torch.int64)), ["bool", "torch.int64"]),
        (dict(mask=torch.full((4, 5), float("nan"))), ["NaN"]),
        (dict(score="luong"), ["'luong'", "'dot', 'scaled_dot'"]),
        (dict(score="dot", scale=0.5), ["scale"]),
        (dict(dropout_p=1.5), ["dropout_p", "1.5"]),
        (dict(query=torch.randn(3, 4, 8), key=torch.randn(2, 5, 8), value=torch.randn(2, 5, 8)), ["do not broadcast", "(3, 4, 8)", "(2, 5, 8)"]),
        (dict(query=torch.randn(8)), ["query", "(8)"]),
    ],
)
def test_bad_input_raises_value_error_naming_it(kwargs, words):
    args = dict(query=torch.randn(2, 4, 8), key=torch.randn(2, 5, 8), value=torch.randn(2, 5, 8))
    args.update(kwargs)
    q, k, v = args.pop("query"), args.pop("key"), args.pop("value")
    with pytest.raises(ValueError) as e:
        attnlab.attention(q, k, v, **args)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_padding_mask_of_wrong_rank_has_a_hint():
    q = torch.randn(2, 4, 3, 8)
    with pytest.raises(ValueError, match="as_key_mask"):
        attnlab.attention(q, q, q, mask=attnlab.masks.padding([3, 2]))


def test_all_finite_is_exact_when_the_sum_overflows():
    from attnlab._checks import all_finite

    big = torch.full((4, 3), 3e38)  # finite elements, a sum that overflows to inf
    assert torch.isinf(big.sum()) and all_finite(big, torch.ones(2))
    for bad in (float("nan"), float("inf"), float("-inf")):
        t = torch.ones(5, 2)
        t[3, 1] = bad
        assert not all_finite(torch.ones(3), t)
    both = torch.tensor([float("inf"), float("-inf")])  # sums to NaN
    assert not all_finite(both)


# ---------------------------------------------------------------- kv_finite (the caller vouches for keys and values)


@pytest.mark.parametrize("score", ["scaled_dot", "dot"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_kv_finite_gives_the_numpy_values_and_the_guarded_gradients(score, need_weights):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, n, 3, generator=g, dtype=torch.float64) for n in (5, 6, 6))
    allowed = torch.rand(2, 1, 5, 6, generator=g) > 0.4
    allowed[0, 0, 2] = False  # a fully masked row: zeros, and zero gradients
    k = torch.where(allowed.any(-2).unsqueeze(-1), k, torch.zeros(()))  # masked keys/values: zero, as an encoder's padding
    v = torch.where(allowed.any(-2).unsqueeze(-1), v, torch.zeros(()))
    fn = ref.scaled_dot if score == "scaled_dot" else ref.dot
    want, want_w = ref.attention(q.numpy(), k.numpy(), v.numpy(), fn, allowed=allowed.numpy())
    grads = []
    for flag in (False, True):
        qq, kk, vv = (x.clone().requires_grad_() for x in (q, k, v))
        out, w = attnlab.attention(qq, kk, vv, score=score, mask=allowed, need_weights=need_weights, kv_finite=flag)
        np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-12, rtol=0)
        if need_weights:
            np.testing.assert_allclose(w.detach().numpy(), want_w, atol=1e-12, rtol=0)
        out.pow(2).sum().backward()
        grads.append([x.grad for x in (qq, kk, vv)])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
    assert torch.all(grads[1][0][0, 0, 2] == 0)  # the fully masked row's query gets no gradient


def test_kv_finite_still_guards_the_query_and_lets_an_allowed_nan_through():
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 2)
    mask = torch.tensor([[True, True, True, False, False]]).unsqueeze(1)  # (1, 1, 5)
    q[0, 1, 0] = float("nan")
    out, _ = attnlab.attention(q, k, v, mask=mask, kv_finite=True, need_weights=True)
    assert torch.isnan(out[0, 1]).all() and torch.isfinite(out[0, [0, 2]]).all()  # the NaN query's row only
    v[0, 2, 1] = float("nan")  # allowed: the arithmetic carries it into that feature of every row
    out, _ = attnlab.attention(q, k, v, mask=mask, kv_finite=True)
    assert torch.isnan(out[0, :, 1]).all()


# ``attnlab.attention``: messages with batch dimensions, the CPU's look-ahead, the non-finite rule's
# gradients (a NaN query row, a NaN key where the mask forbids, a NaN query in a fully masked row), the meta device with the causal mask, and ``weigh``'s ``inplace``.
#
# Every value is compared with a float64 reference written here (softmax(q kᵀ/√d masked) v, with the
# offending row or key dropped), computed by autograd for the gradients.
core = importlib.import_module("attnlab.functional.attention")  # the module (the package exports the function)


def _reference(q, k, v, allow):
    """float64 softmax(q kᵀ/√d, −∞ where ``allow`` is False) v; a row that may attend nothing is zero."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allow, float("-inf"))
    dead = ~allow.any(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v, w


def _leaves(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


# ---- messages -------------------------------------------------------------------------------------------


def test_length_mismatch_message_reads_k_from_the_second_to_last_axis_with_a_batch_axis():
    q, k, v = _leaves((2, 3, 4), (2, 3, 4), (2, 5, 4))  # value.shape[2] = 4, its k = 5
    with pytest.raises(ValueError) as info:
        attnlab.attention(q, k, v)
    assert str(info.value) == (
        "key and value must have the same length k: key (2, 3, 4) has k=3, value (2, 5, 4) has k=5"
    )


def test_an_unknown_score_name_is_reported_before_any_feature_size_check():
    q, k, v = _leaves((1, 3, 4), (1, 3, 5), (1, 3, 2))  # sizes differ: only the dot scores need them equal
    with pytest.raises(ValueError, match=r"^score must be 'dot', 'scaled_dot' or a callable .*got 'general'"):
        attnlab.attention(q, k, v, score="general")


# ---- the CPU's look-ahead (_host_checks) ------------------------------------------------------------------


def test_host_checks_is_true_for_an_eager_cpu_tensor_only(monkeypatch):
    assert core._host_checks(torch.zeros(2)) is True
    assert core._host_checks(torch.zeros(2, device="meta")) is False
    monkeypatch.setattr(core._checks, "tracing", lambda: True)  # as under torch.compile / export
    assert core._host_checks(torch.zeros(2)) is False


def _count_guard(monkeypatch):
    calls = []
    for name in ("_guard", "_guard_device"):  # the CPU's guard after a look, the branch-free one elsewhere
        real = getattr(core, name)

        def spy(*args, real=real, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(core, name, spy)
    return calls


def test_finite_cpu_inputs_skip_the_guard_and_a_nan_or_the_branch_free_path_runs_it(monkeypatch):
    q, k, v = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2))
    allow = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    want, _ = _reference(q, k, v, allow)
    calls = _count_guard(monkeypatch)
    out, _ = attnlab.attention(q, k, v, mask=allow)
    assert calls == []  # finite inputs, looked at on the CPU: no copies
    torch.testing.assert_close(out, want)
    v_nan = v.clone()
    v_nan[0, 3, 0] = float("nan")  # forbidden to every row but the last
    out, _ = attnlab.attention(q, k, v_nan, mask=allow)
    assert calls == [1]
    torch.testing.assert_close(out[:, :2], want[:, :2])
    assert out[:, 2].isnan().all()
    monkeypatch.setattr(core, "_host_checks", lambda t: False)  # as on a GPU: no look-ahead
    out, _ = attnlab.attention(q, k, v, mask=allow)
    assert calls == [1, 1]
    torch.testing.assert_close(out, want)


# ---- the non-finite rule's gradients ----------------------------------------------------------------------


@pytest.mark.parametrize("kv_finite", [False, True])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_query_row_is_nan_and_reaches_no_other_rows_gradient(kv_finite, need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=1)
    allow = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    q = q0.clone()
    q[0, 1, 2] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q, k0.clone(), v0.clone()))
    out, _ = attnlab.attention(q, k, v, mask=allow, kv_finite=kv_finite, need_weights=need_weights)
    assert out[0, 1].isnan().all()
    keep = [0, 2]  # the finite rows: the reference leaves the NaN row out
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0[:, keep], k0, v0))
    want, _ = _reference(rq, rk, rv, allow[keep])
    torch.testing.assert_close(out[:, keep], want)
    g = torch.linspace(-1, 1, want.numel(), dtype=torch.float64).view(want.shape)
    (out[:, keep] * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(k.grad, rk.grad)
    torch.testing.assert_close(v.grad, rv.grad)
    torch.testing.assert_close(q.grad[:, keep], rq.grad)
    assert (q.grad[:, 1] == 0).all()


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_key_where_the_mask_forbids_changes_no_output_and_no_gradient(need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=2)
    pad = torch.tensor([True, False, True, True])  # key 1 is padding for every query
    k = k0.clone()
    k[0, 1] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q0.clone(), k, v0.clone()))
    out, w = attnlab.attention(q, k, v, mask=pad.view(1, 1, 4), need_weights=need_weights)
    keep = [0, 2, 3]
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0, k0[:, keep], v0[:, keep]))
    want, want_w = _reference(rq, rk, rv, torch.ones(3, 3, dtype=torch.bool))
    torch.testing.assert_close(out, want)
    if need_weights:
        torch.testing.assert_close(w[..., keep], want_w)
        assert (w[..., 1] == 0).all()
    g = torch.linspace(-1, 1, want.numel(), dtype=torch.float64).view(want.shape)
    (out * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(q.grad, rq.grad)
    torch.testing.assert_close(k.grad[:, keep], rk.grad)
    torch.testing.assert_close(v.grad[:, keep], rv.grad)
    assert (k.grad[:, 1] == 0).all() and (v.grad[:, 1] == 0).all()


@pytest.mark.parametrize("kv_finite", [False, True])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_query_in_a_fully_masked_row_gives_a_zero_row_and_zero_gradients(kv_finite, need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=3)
    allow = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.bool)
    q = q0.clone()
    q[0, 1, 0] = float("nan")  # the row that may attend nothing
    q, k, v = (t.requires_grad_() for t in (q, k0.clone(), v0.clone()))
    out, w = attnlab.attention(q, k, v, mask=allow, kv_finite=kv_finite, need_weights=need_weights)
    assert (out[0, 1] == 0).all()  # a fully masked row is zero regardless
    keep = [0, 2]
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0[:, keep], k0, v0))
    want, want_w = _reference(rq, rk, rv, allow[keep])
    torch.testing.assert_close(out[:, keep], want)
    if need_weights:
        torch.testing.assert_close(w[:, keep], want_w)
        assert (w[:, 1] == 0).all()
    g = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    (out * g).sum().backward()
    (want * g[:, keep]).sum().backward()
    torch.testing.assert_close(k.grad, rk.grad)
    torch.testing.assert_close(v.grad, rv.grad)
    torch.testing.assert_close(q.grad[:, keep], rq.grad)
    assert (q.grad[:, 1] == 0).all()


# ---- the meta device --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q_len, with_mask, need_weights",
    [(3, True, False), (3, False, False), (4, True, True), (4, False, True), (3, True, True)],
)
def test_causal_attention_on_the_meta_device_builds_its_mask_there(q_len, with_mask, need_weights):
    q = torch.empty(2, q_len, 4, device="meta")
    k, v = torch.empty(2, 4, 4, device="meta"), torch.empty(2, 4, 3, device="meta")
    mask = torch.ones(2, 1, 4, dtype=torch.bool, device="meta") if with_mask else None
    out, w = attnlab.attention(q, k, v, mask=mask, causal=True, need_weights=need_weights)
    assert out.device.type == "meta" and out.shape == (2, q_len, 3)
    if need_weights:
        assert w.device.type == "meta" and w.shape == (2, q_len, 4)


# ---- weigh ------------------------------------------------------------------------------------------------


def test_weigh_leaves_its_scores_untouched_by_default():
    e = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    before = e.clone()
    w = core.weigh(e, torch.tensor([[True, True, False], [True, True, True]]))
    assert torch.equal(e, before)
    want = torch.exp(before.double()) * torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(w.double(), want / want.sum(-1, keepdim=True))


def test_weigh_in_place_writes_the_weights_into_the_scores_storage():
    e = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    want = torch.softmax(e.double(), -1)
    with torch.no_grad():
        w = core.weigh(e, None, inplace=True)
    assert w.data_ptr() == e.data_ptr()  # no (q, k) allocation
    torch.testing.assert_close(w.double(), want)


# ---- no keys ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_with_no_keys_every_row_is_zero_a_non_finite_querys_too(need_weights, bad):
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    q[0, 1, 0] = bad  # no mask: nothing to guard, and c_i = Σ_j α_ij v_j over no j is 0
    q.requires_grad_()
    k = torch.randn(2, 0, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 0, 5, dtype=torch.float64, requires_grad=True)
    out, w = attnlab.attention(q, k, v, need_weights=need_weights)
    assert out.shape == (2, 3, 5) and (out == 0).all()
    if need_weights:
        assert w.shape == (2, 3, 0)
    out.sum().backward()
    assert (q.grad == 0).all()
