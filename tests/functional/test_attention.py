"""attnlab.attention: both paths against the NumPy reference, and the contract."""

from __future__ import annotations

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


# ---------------------------------------------------------------- the seeds' examples


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
