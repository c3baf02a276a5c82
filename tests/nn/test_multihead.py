"""MultiHeadAttention: against torch.nn.MultiheadAttention with copied weights, against a
float64 NumPy multi-head implementation written here (grouped-query heads included),
fully masked rows, converters, registry and input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import attnlab
from attnlab.functional.multihead import multi_head_attention
from attnlab.nn import CrossAttention, GroupedQueryAttention, MultiHeadAttention
from attnlab.nn.convert import from_torch, mask_from_torch, mask_to_torch, to_torch

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-5


def _torch_mha(dim=16, heads=4, kdim=None, vdim=None, bias=True):
    torch.manual_seed(1)
    t = nn.MultiheadAttention(dim, heads, kdim=kdim, vdim=vdim, bias=bias, batch_first=True).eval()
    with torch.no_grad():  # non-zero biases so that they are tested
        if bias:
            t.in_proj_bias.normal_()
            t.out_proj.bias.normal_()
    return t


# ---- against torch.nn.MultiheadAttention -------------------------------------------------

@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_matches_torch(need_weights):
    t = _torch_mha()
    m = from_torch(t)
    x = torch.randn(3, 7, 16)
    ref, ref_w = t(x, x, x, need_weights=True, average_attn_weights=False)
    out, w = m(x, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
    else:
        assert w is None


@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_kdim_vdim_padding_matches_torch(need_weights):
    t = _torch_mha(kdim=10, vdim=6)
    m = from_torch(t)
    assert not m.packed
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 9, 10), torch.randn(2, 9, 6)
    pad = attnlab.masks.padding([9, 4])  # (b, k) True = real
    ref, ref_w = t(q, k, v, key_padding_mask=~pad, need_weights=True, average_attn_weights=False)
    out, w = m(q, k, v, mask=pad, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
        assert torch.all(w[1, :, :, 4:] == 0)


@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_matches_torch(need_weights):
    t = _torch_mha()
    m = from_torch(t)
    x = torch.randn(2, 6, 16)
    forbid = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch polarity: True = forbidden
    ref, ref_w = t(x, x, x, attn_mask=forbid, need_weights=True, average_attn_weights=False)
    out, w = m(x, causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=ATOL, rtol=0)
    # the same through a converted mask
    out2, _ = m(x, mask=mask_from_torch(forbid))
    torch.testing.assert_close(out2, ref, atol=ATOL, rtol=0)


def test_cross_attention_same_dims_and_float_mask_match_torch():
    t = _torch_mha()
    m = from_torch(t)
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 8, 16)
    bias = torch.randn(3, 8)
    ref, _ = t(q, kv, kv, attn_mask=bias)
    out, _ = m(q, kv, mask=bias)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)
    out_c, _ = CrossAttention(16, 4)(q, kv)
    assert out_c.shape == (2, 3, 16)


def test_to_torch_round_trip_and_mask_polarity():
    m = MultiHeadAttention(16, 4).eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
    t = to_torch(m).eval()
    x = torch.randn(2, 5, 16)
    pad = attnlab.masks.padding([5, 2])
    ref, _ = t(x, x, x, key_padding_mask=mask_to_torch(pad))
    out, _ = m(x, mask=pad)
    # real query rows match PyTorch; padded query rows are defined as zeros (PyTorch computes them)
    torch.testing.assert_close(out[pad], ref[pad], atol=ATOL, rtol=0)
    assert torch.equal(out[~pad], torch.zeros_like(out[~pad]))
    back = from_torch(t)
    torch.testing.assert_close(back(x)[0], m(x)[0], atol=0, rtol=0)
    with pytest.raises(ValueError, match="grouped-query"):
        to_torch(MultiHeadAttention(16, 4, num_kv_heads=2))
    # (b·h, q, k) attn_mask with num_heads
    m3 = torch.rand(2 * 4, 5, 5) > 0.3
    got = mask_from_torch(m3, num_heads=4)
    assert got.shape == (2, 4, 5, 5) and torch.equal(got, ~m3.view(2, 4, 5, 5))


# ---- against a float64 NumPy implementation ----------------------------------------------

def numpy_mha(xq, xk, xv, w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, h, h_kv, mask=None, causal=False):
    """Split, per-head scaled-dot attention, concat, output projection; all in float64 loops."""
    q = xq @ w_q.T + b_q
    k = xk @ w_k.T + b_k
    v = xv @ w_v.T + b_v
    b, n_q, _ = q.shape
    n_k = k.shape[1]
    d_h = q.shape[-1] // h
    heads = np.zeros((b, n_q, h * d_h))
    weights = np.zeros((b, h, n_q, n_k))
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // h_kv)
            qh = q[bi, :, hi * d_h:(hi + 1) * d_h]
            kh = k[bi, :, g * d_h:(g + 1) * d_h]
            vh = v[bi, :, g * d_h:(g + 1) * d_h]
            for i in range(n_q):
                e = np.array([qh[i] @ kh[j] / np.sqrt(d_h) for j in range(n_k)])
                ok = np.ones(n_k, dtype=bool)
                if mask is not None:
                    ok &= mask[bi]
                if causal:
                    ok &= np.arange(n_k) <= i + (n_k - n_q)
                if not ok.any():
                    continue
                e = np.where(ok, e, -np.inf)
                a = np.exp(e - e[ok].max())
                a /= a.sum()
                weights[bi, hi, i] = a
                heads[bi, i, hi * d_h:(hi + 1) * d_h] = a @ vh
    return heads @ w_o.T + b_o, weights


@pytest.mark.parametrize("h,h_kv", [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_numpy_float64_including_grouped_query(h, h_kv, causal):
    torch.manual_seed(h_kv)
    m = MultiHeadAttention(16, h, num_kv_heads=h_kv).double().eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pad = attnlab.masks.padding([6, 3])
    p = {k: v.detach().numpy() for k, v in m.projection_weights().items()}
    ref_out, ref_w = numpy_mha(
        x.numpy(), x.numpy(), x.numpy(), p["w_q"], p["w_k"], p["w_v"], m.out_proj.weight.detach().numpy(),
        p["b_q"], p["b_k"], p["b_v"], m.out_proj.bias.detach().numpy(), h, h_kv, mask=pad.numpy(), causal=causal,
    )
    real = pad.numpy()
    for need in (True, False):
        out, w = m(x, mask=pad, causal=causal, need_weights=need)
        # real query rows match; padded tokens are not queries: zero output and weights
        np.testing.assert_allclose(out.detach().numpy()[real], ref_out[real], atol=1e-10)
        assert not out.detach().numpy()[~real].any()
        if need:
            np.testing.assert_allclose(w.detach().numpy().transpose(0, 2, 1, 3)[real], ref_w.transpose(0, 2, 1, 3)[real], atol=1e-12)
            assert not w.detach().numpy().transpose(0, 2, 1, 3)[~real].any()


@pytest.mark.parametrize("causal", [False, True])
def test_long_inference_on_contiguous_heads_matches_numpy(monkeypatch, causal):
    """The no-grad path that copies the heads contiguous (long inputs; and the weights path), forced on a short one."""
    import attnlab.nn.multihead as mh

    monkeypatch.setattr(mh, "CONTIGUOUS_HEADS_FROM", 1)
    torch.manual_seed(5)
    m = MultiHeadAttention(16, 4).double().eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pad = attnlab.masks.padding([6, 4])
    p = {k: v.detach().numpy() for k, v in m.projection_weights().items()}
    ref_out, ref_w = numpy_mha(
        x.numpy(), x.numpy(), x.numpy(), p["w_q"], p["w_k"], p["w_v"], m.out_proj.weight.detach().numpy(),
        p["b_q"], p["b_k"], p["b_v"], m.out_proj.bias.detach().numpy(), 4, 4, mask=pad.numpy(), causal=causal,
    )
    real = pad.numpy()
    for need in (False, True):
        with torch.inference_mode():
            out, w = m(x, mask=pad, causal=causal, need_weights=need)
        np.testing.assert_allclose(out.numpy()[real], ref_out[real], atol=1e-10)
        assert not out.numpy()[~real].any()
        if need:
            np.testing.assert_allclose(w.numpy().transpose(0, 2, 1, 3)[real], ref_w.transpose(0, 2, 1, 3)[real], atol=1e-12)
        else:
            assert w is None


def test_gqa_registry_and_parameter_count():
    g = attnlab.create("gqa", dim=32, num_heads=8, num_kv_heads=2)
    assert isinstance(g, GroupedQueryAttention)
    assert g.in_proj_weight.shape == (32 + 2 * 2 * 4, 32)  # h·d_h + 2·h_kv·d_h rows
    assert isinstance(attnlab.create("multi-head", dim=32, num_heads=4), MultiHeadAttention)
    assert isinstance(attnlab.create("cross", dim=32, num_heads=4, kdim=8), CrossAttention)
    for name in ("multi-head", "gqa", "cross"):
        assert name in attnlab.available()


# ---- the contract: fully masked rows, weights on request, checks ---------------------------

@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_zero_and_finite_gradients(need_weights):
    m = MultiHeadAttention(16, 4)
    with torch.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    x = torch.randn(2, 5, 16, requires_grad=True)
    mask = torch.ones(2, 5, 5, dtype=torch.bool)
    mask[0, 2] = False  # query 2 of batch 0 may attend nothing
    out, w = m(x, mask=mask, need_weights=need_weights)
    # the heads of the dead row are zero, so the output is the output projection's bias alone
    torch.testing.assert_close(out[0, 2], m.out_proj.bias, atol=0, rtol=0)
    with attnlab.trace() as t:
        m(x, mask=mask)
    assert torch.all(t["heads"].value[0, 2] == 0)
    if need_weights:
        assert torch.all(w[0, :, 2] == 0)
        torch.testing.assert_close(w[1].sum(-1), torch.ones(4, 5))
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)
    if need_weights:  # torch's module gives NaN for the same row with weights on (the pain fixed here)
        ref, ref_w = to_torch(m)(x, x, x, attn_mask=~mask.repeat_interleave(4, 0), need_weights=True)
        assert torch.isnan(ref[0, 2]).all() and torch.isnan(ref_w[0, 2]).all()


def test_trace_records_the_named_steps():
    m = MultiHeadAttention(8, 2)
    with attnlab.trace() as t:
        m(torch.randn(1, 3, 8))
    for name in ("projected_query", "projected_keys", "projected_values", "weights", "context", "heads", "output"):
        assert name in t
    assert t["weights"].value.shape == (1, 2, 3, 3)


def test_packed_projection_equals_separate():
    from attnlab.functional.multihead import project, project_packed
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 4, 8)
    p = m.projection_weights()
    packed = project_packed(x, m.in_proj_weight, m.in_proj_bias, (8, 8, 8))
    for got, w, bias in zip(packed, ("w_q", "w_k", "w_v"), ("b_q", "b_k", "b_v")):
        torch.testing.assert_close(got, project(x, p[w], p[bias], "query"), atol=1e-6, rtol=0)
    a, _ = multi_head_attention(x, x, x, p, num_heads=2)
    torch.testing.assert_close(a, m(x)[0], atol=1e-6, rtol=0)  # the module's packed path == the paper's steps


@pytest.mark.parametrize(
    "kwargs,match",
    [({"dim": 10, "num_heads": 4}, "multiple of num_heads"), ({"dim": 16, "num_heads": 4, "num_kv_heads": 3}, "divide"),
     ({"dim": 16, "num_heads": 4, "rope": True, "alibi": True}, "one of")],
)
def test_bad_construction_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(**kwargs)


def test_bad_inputs_raise_value_error():
    m = MultiHeadAttention(16, 4)
    with pytest.raises(ValueError, match=r"\(b, q, dim\) with dim=16; got shape \(5,\)"):
        m(torch.randn(5))  # (q, dim) is an unbatched input, as in torch; (dim,) is nothing
    with pytest.raises(ValueError, match=r"\(b, q, dim\) or unbatched \(q, dim\) with dim=16; got shape \(5, 12\)"):
        m(torch.randn(5, 12))
    with pytest.raises(ValueError, match=r"dim=16; got shape \(2, 5, 12\)"):
        m(torch.randn(2, 5, 12))
    with pytest.raises(ValueError, match=r"\(b, n, d\)"):  # the functional form checks too
        multi_head_attention(torch.randn(5, 16), torch.randn(5, 16), torch.randn(5, 16), m.projection_weights(),
                             num_heads=4)
    with pytest.raises(ValueError, match="does not broadcast"):
        m(torch.randn(2, 5, 16), mask=torch.ones(3, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache is for self-attention"):
        m(torch.randn(2, 5, 16), torch.randn(2, 3, 16), cache=attnlab.nn.LayerCache())
