"""``multi_head_attention``'s head checks (exact messages, the head size returned) and its defaults."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from attnlab.functional import multihead as mh

r = torch.randn


@pytest.mark.parametrize(
    "h, h_kv, wq_rows, wk_rows, wv_rows, message",
    [
        (0, 1, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=0, num_kv_heads=1"),
        (2, 0, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=2, num_kv_heads=0"),
        (4, 3, 4, 4, 4, "num_kv_heads must divide num_heads (both >= 1); got num_heads=4, num_kv_heads=3"),
        (2, 1, 3, 4, 4, "w_q's output features must be a positive multiple of num_heads=2; got (3, 3)"),
        (2, 1, 0, 4, 4, "w_q's output features must be a positive multiple of num_heads=2; got (0, 3)"),
        (4, 2, 12, 5, 6, "w_k must have num_kv_heads·head_dim = 2·3 = 6 output features; got shape (5, 3)"),
        (4, 2, 12, 6, 5, "w_v must have num_kv_heads·head_dim = 2·3 = 6 output features; got shape (5, 3)"),
    ],
)
def test_check_heads_errors_give_the_counts_and_shapes(h, h_kv, wq_rows, wk_rows, wv_rows, message) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        mh.check_heads(h, h_kv, r(wq_rows, 3), r(wk_rows, 3), r(wv_rows, 3))


@pytest.mark.parametrize("h, h_kv, rows, kv_rows, head_dim", [(1, 1, 1, 1, 1), (4, 2, 12, 6, 3), (2, 2, 4, 4, 2)])
def test_check_heads_returns_the_integer_head_size(h, h_kv, rows, kv_rows, head_dim) -> None:
    got = mh.check_heads(h, h_kv, r(rows, 3), r(kv_rows, 3), r(kv_rows, 3))
    assert got == head_dim and type(got) is int


def test_multi_head_attention_returns_no_weights_unless_asked_and_the_numpy_heads_when_asked() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(1, 3, 4))
    w_q, w_k, w_v, w_o = (rng.normal(size=(4, 4)) for _ in range(4))
    args = {n: torch.tensor(a) for n, a in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o))}
    xt = torch.tensor(x)
    out, weights = mh.multi_head_attention(xt, xt, xt, args, num_heads=2)
    assert weights is None
    out2, weights2 = mh.multi_head_attention(xt, xt, xt, args, num_heads=2, need_weights=True)
    # reference: per head i (features 2i, 2i+1), α = softmax(Q_i K_iᵀ / √2)
    q, k, v = x[0] @ w_q.T, x[0] @ w_k.T, x[0] @ w_v.T
    heads, alphas = [], []
    for i in range(2):
        sl = slice(2 * i, 2 * i + 2)
        e = q[:, sl] @ k[:, sl].T / np.sqrt(2)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        alphas.append(a)
        heads.append(a @ v[:, sl])
    ref = np.concatenate(heads, -1) @ w_o.T
    np.testing.assert_allclose(out.numpy()[0], ref, rtol=1e-10)
    np.testing.assert_allclose(out2.numpy()[0], ref, rtol=1e-10)
    np.testing.assert_allclose(weights2.numpy()[0], np.stack(alphas), rtol=1e-10)


def _mha_args(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """x (1, 2, 3): q = 2 ≠ d = 3; two heads of size 2; d_out = 5."""
    return {"w_q": rng.normal(size=(4, 3)), "w_k": rng.normal(size=(4, 3)), "w_v": rng.normal(size=(4, 3)),
            "w_o": rng.normal(size=(5, 4))}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"w_q": [1.0]}, "w_q must be a torch.Tensor; got list"),
        ({"w_k": [1.0]}, "w_k must be a torch.Tensor; got list"),
        ({"w_v": [1.0]}, "w_v must be a torch.Tensor; got list"),
        ({"w_q": r(4, 5)}, "w_q must be (out, 3) to act on inputs of size 3; got (4, 5)"),
        ({"w_k": r(4, 5)}, "w_k must be (out, 3) to act on inputs of size 3; got (4, 5)"),
        ({"w_v": r(4, 3, 1)}, "w_v must be (out, 3) to act on inputs of size 3; got (4, 3, 1)"),
        ({"w_o": [1.0]}, "w_o must be a torch.Tensor; got list"),
        ({"w_o": r(5, 3)}, "w_o must be (d_out, 4); got (5, 3)"),
        ({"w_o": r(5, 4, 1)}, "w_o must be (d_out, 4); got (5, 4, 1)"),
    ],
)
def test_multi_head_attention_weight_errors_name_the_weight_and_the_shapes(change, message) -> None:
    args = {n: torch.tensor(a, dtype=torch.float32) for n, a in _mha_args(np.random.default_rng(0)).items()}
    args.update({n: (w.float() if isinstance(w, torch.Tensor) else w) for n, w in change.items()})
    x = r(1, 2, 3)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        mh.multi_head_attention(x, x, x, args, num_heads=2)


def np_mha(xq, xk, xv, p, h, scale, allowed):
    """Vaswani et al. §3.2.2 in float64, one batch element: biases, a given scale, a bool mask (h, q, k)."""
    q, k, v = xq @ p["w_q"].T + p["b_q"], xk @ p["w_k"].T + p["b_k"], xv @ p["w_v"].T + p["b_v"]
    d = q.shape[-1] // h
    heads, alphas = [], []
    for i in range(h):
        sl = slice(i * d, (i + 1) * d)
        e = np.where(allowed[i], q[:, sl] @ k[:, sl].T * scale, -np.inf)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        alphas.append(a)
        heads.append(a @ v[:, sl])
    return np.concatenate(heads, -1) @ p["w_o"].T + p["b_o"], np.stack(alphas)


def test_multi_head_attention_with_biases_scale_and_a_per_head_mask_matches_numpy() -> None:
    rng = np.random.default_rng(4)
    p = _mha_args(rng)
    p.update(b_q=rng.normal(size=4), b_k=rng.normal(size=4), b_v=rng.normal(size=4), b_o=rng.normal(size=5))
    xq, xkv = rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 4, 3))
    allowed = np.ones((1, 2, 2, 4), dtype=bool)  # (b, h, q, k), q = 2 ≠ d = 3
    allowed[0, 0, 0, [1, 2]] = False
    allowed[0, 1, 1, [0, 3]] = False
    ref, alphas = np_mha(xq[0], xkv[0], xkv[0], p, 2, 0.3, allowed[0])
    tt = {n: torch.tensor(a) for n, a in p.items()}
    for need in (False, True):
        out, w = mh.multi_head_attention(
            torch.tensor(xq), torch.tensor(xkv), torch.tensor(xkv), tt, num_heads=2, scale=0.3,
            mask=torch.tensor(allowed), need_weights=need,
        )
        np.testing.assert_allclose(out.numpy()[0], ref, rtol=1e-10, atol=1e-12)
        if need:
            np.testing.assert_allclose(w.numpy()[0], alphas, rtol=1e-10, atol=1e-12)


def test_multi_head_attention_applies_its_dropout_to_the_weights_with_the_mean_kept() -> None:
    """Identity projections and all-ones values: each output entry is Σ_j m_j α_j / (1 − p), 1 without dropout."""
    torch.manual_seed(0)
    n, p = 400, 0.5
    eye = torch.eye(2, dtype=torch.float64)
    x = torch.randn(1, n, 2, dtype=torch.float64)
    ones = torch.ones(1, 8, 2, dtype=torch.float64)
    identity = {"w_q": eye, "w_k": eye, "w_v": eye, "w_o": eye}
    out, _ = mh.multi_head_attention(x, ones, ones, identity, num_heads=1, dropout_p=p)
    out = out[0, :, 0]
    assert float((out - 1).abs().max()) > 0.5  # some rows lost most of their weight, some gained
    assert abs(float(out.mean()) - 1.0) < 0.1  # unbiased: E[m / (1 − p)] = 1
    plain, _ = mh.multi_head_attention(x, ones, ones, identity, num_heads=1)
    torch.testing.assert_close(plain, torch.ones_like(plain))


@pytest.mark.parametrize(
    "q, k, v, message",
    [
        (r(2, 3), r(1, 4, 3), r(1, 4, 3), "query must be (b, n, d); got shape (2, 3)"),
        (r(1, 2, 3), r(4, 3), r(1, 4, 3), "key must be (b, n, d); got shape (4, 3)"),
        (r(1, 2, 3), r(1, 4, 3), r(4, 3), "value must be (b, n, d); got shape (4, 3)"),
        (r(1, 2, 3), [1.0], r(1, 4, 3), "key must be a torch.Tensor; got list"),
        (r(1, 2, 3), r(1, 4, 3), [1.0], "value must be a torch.Tensor; got list"),
        (r(1, 2, 3), r(1, 4, 3), r(1, 5, 3), "key and value must share (b, k); got key (1, 4, 3), value (1, 5, 3)"),
        (r(1, 2, 3), r(2, 4, 3), r(2, 4, 3), "query and key batch sizes differ: query (1, 2, 3), key (2, 4, 3)"),
        (
            r(1, 2, 3),
            r(1, 4, 3).double(),
            r(1, 4, 3),
            "query, key, value must share one dtype; got query torch.float32, key torch.float64, value torch.float32 "
            "(convert with .to(dtype))",
        ),
    ],
)
def test_check_inputs_errors_name_the_input_and_its_shape(q, k, v, message) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        mh.check_inputs(q, k, v)


def test_multi_head_trace_records_each_step_with_formula_latex_and_numpy_values() -> None:
    import attnlab

    rng = np.random.default_rng(8)
    p = _mha_args(rng)
    x = rng.normal(size=(1, 2, 3))
    with attnlab.trace() as tr:
        mh.multi_head_attention(*(torch.tensor(x),) * 3, {n: torch.tensor(a) for n, a in p.items()}, num_heads=2)
    got = {s.name: (s.formula, s.latex) for s in tr}
    assert got["projected_query"] == ("Q = X W_qᵀ", r"Q = X W_q^\top")
    assert got["projected_keys"] == ("K = X W_kᵀ", r"K = X W_k^\top")
    assert got["projected_values"] == ("V = X W_vᵀ", r"V = X W_v^\top")
    assert got["heads"] == ("concat(head_1, …, head_h)", r"\mathrm{concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)")
    assert got["output"] == ("MultiHead = concat(heads) W_oᵀ", r"\mathrm{MultiHead} = \mathrm{concat}(\cdot)\, W_o^\top")
    zero = {k: np.zeros(n) for k, n in (("b_q", 4), ("b_k", 4), ("b_v", 4), ("b_o", 5))}
    ref, alphas = np_mha(x[0], x[0], x[0], {**p, **zero}, 2, 1 / np.sqrt(2), np.ones((2, 2, 2), dtype=bool))
    np.testing.assert_allclose(tr["weights"].value.numpy()[0], alphas, rtol=1e-10)
    heads = tr["context"].value.numpy()[0]  # (h, q, d_h)
    np.testing.assert_allclose(tr["heads"].value.numpy()[0], np.concatenate(list(heads), -1), rtol=1e-12)
    np.testing.assert_allclose(tr["output"].value.numpy()[0], ref, rtol=1e-10)


def test_packed_projection_splits_one_matmul_and_records_the_three_projections() -> None:
    import attnlab

    rng = np.random.default_rng(9)
    x, w, b = rng.normal(size=(2, 3, 5)), rng.normal(size=(10, 5)), rng.normal(size=10)
    with attnlab.trace() as tr:
        q, k, v = mh.project_packed(torch.tensor(x), torch.tensor(w), torch.tensor(b), (4, 3, 3))
    y = x @ w.T + b
    for got, ref in zip((q, k, v), (y[..., :4], y[..., 4:7], y[..., 7:])):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    assert [(s.name, s.formula, s.latex) for s in tr] == [
        ("projected_query", "Q = X W_qᵀ", r"Q = X W_q^\top"),
        ("projected_keys", "K = X W_kᵀ", r"K = X W_k^\top"),
        ("projected_values", "V = X W_vᵀ", r"V = X W_v^\top"),
    ]
    np.testing.assert_allclose(tr["projected_keys"].value.numpy(), y[..., 4:7], rtol=1e-12)


def test_grouped_query_heads_share_their_key_value_head_against_numpy() -> None:
    """h = 4 query heads, h_kv = 2: query head i uses key/value head i // 2."""
    rng = np.random.default_rng(10)
    x = rng.normal(size=(1, 3, 4))
    w_q, w_k, w_v, w_o = rng.normal(size=(8, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 4)), rng.normal(size=(3, 8))
    xt = torch.tensor(x)
    out, w = mh.multi_head_attention(
        xt, xt, xt, {"w_q": torch.tensor(w_q), "w_k": torch.tensor(w_k), "w_v": torch.tensor(w_v), "w_o": torch.tensor(w_o)},
        num_heads=4, num_kv_heads=2, need_weights=True,
    )
    q, k, v = x[0] @ w_q.T, x[0] @ w_k.T, x[0] @ w_v.T
    heads, alphas = [], []
    for i in range(4):
        g = i // 2
        e = q[:, 2 * i : 2 * i + 2] @ k[:, 2 * g : 2 * g + 2].T / np.sqrt(2)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        alphas.append(a)
        heads.append(a @ v[:, 2 * g : 2 * g + 2])
    np.testing.assert_allclose(w.numpy()[0], np.stack(alphas), rtol=1e-10)
    np.testing.assert_allclose(out.numpy()[0], np.concatenate(heads, -1) @ w_o.T, rtol=1e-10)


def test_the_key_bias_shows_in_the_traced_projected_keys_though_softmax_cancels_it() -> None:
    """q·(k_j + b_k) = q·k_j + q·b_k: the key bias shifts a query's scores by one constant, so the output cannot
    show it, but the traced step ``projected_keys`` is K = X W_kᵀ + b_k."""
    import attnlab

    rng = np.random.default_rng(14)
    p = _mha_args(rng)
    b = {n: rng.normal(size=s) for n, s in (("b_q", 4), ("b_k", 4), ("b_v", 4), ("b_o", 5))}
    xq, xkv = rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 4, 3))
    with attnlab.trace() as tr:
        mh.multi_head_attention(
            torch.tensor(xq), torch.tensor(xkv), torch.tensor(xkv), {n: torch.tensor(a) for n, a in {**p, **b}.items()},
            num_heads=2,
        )
    np.testing.assert_allclose(tr["projected_query"].value.numpy(), xq @ p["w_q"].T + b["b_q"], rtol=1e-12)
    np.testing.assert_allclose(tr["projected_keys"].value.numpy(), xkv @ p["w_k"].T + b["b_k"], rtol=1e-12)
    np.testing.assert_allclose(tr["projected_values"].value.numpy(), xkv @ p["w_v"].T + b["b_v"], rtol=1e-12)
