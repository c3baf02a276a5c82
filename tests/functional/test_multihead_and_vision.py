"""The functional multi-head and CBAM pieces against independent references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlab
from attnlab.functional import channel_attention, multi_head_attention, spatial_attention


def _weights(m: torch.nn.MultiheadAttention):
    wq, wk, wv = m.in_proj_weight.chunk(3)
    bq, bk, bv = m.in_proj_bias.chunk(3)
    return dict(w_q=wq, w_k=wk, w_v=wv, b_q=bq, b_k=bk, b_v=bv, w_o=m.out_proj.weight, b_o=m.out_proj.bias)


@pytest.mark.parametrize("need_weights", [False, True])
def test_multi_head_matches_torch_with_padding(need_weights):
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    pad = attnlab.masks.padding([7, 4])
    out, w = multi_head_attention(x, mem, mem, _weights(m), num_heads=4, mask=pad, need_weights=need_weights)
    ref_out, ref_w = m(x, mem, mem, key_padding_mask=~pad, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)


def test_grouped_query_heads_match_a_numpy_loop():
    rng = np.random.default_rng(0)
    b, n, d, h, hkv, dh = 2, 4, 6, 4, 2, 3
    x = rng.normal(size=(b, n, d))
    Wq, Wk, Wv, Wo = rng.normal(size=(h * dh, d)), rng.normal(size=(hkv * dh, d)), rng.normal(size=(hkv * dh, d)), rng.normal(size=(5, h * dh))
    heads = []
    for i in range(h):
        g = i // (h // hkv)
        Q = x @ Wq[i * dh:(i + 1) * dh].T
        K = x @ Wk[g * dh:(g + 1) * dh].T
        V = x @ Wv[g * dh:(g + 1) * dh].T
        s = Q @ K.transpose(0, 2, 1) / np.sqrt(dh)
        w = np.exp(s - s.max(-1, keepdims=True))
        heads.append((w / w.sum(-1, keepdims=True)) @ V)
    want = np.concatenate(heads, -1) @ Wo.T
    T = lambda a: torch.tensor(a)  # noqa: E731
    xt = T(x)
    out, _ = multi_head_attention(xt, xt, xt, {"w_q": T(Wq), "w_k": T(Wk), "w_v": T(Wv), "w_o": T(Wo)}, num_heads=h,
                                  num_kv_heads=hkv)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-12)


def test_multi_head_bad_heads():
    x = torch.randn(1, 3, 8)
    w = torch.randn(8, 8)
    with pytest.raises(ValueError, match="num_kv_heads must divide num_heads"):
        multi_head_attention(x, x, x, {"w_q": w, "w_k": w, "w_v": w, "w_o": w}, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="w_k must have"):
        multi_head_attention(x, x, x, {"w_q": w, "w_k": w, "w_v": w[:4], "w_o": w}, num_heads=4, num_kv_heads=2)


def test_cbam_channel_and_spatial_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 6, 5, 4))
    w1, b1, w2, b2 = rng.normal(size=(3, 6)), rng.normal(size=3), rng.normal(size=(6, 3)), rng.normal(size=6)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    mlp = lambda z: w2 @ np.maximum(w1 @ z + b1, 0) + b2  # noqa: E731
    want_mc = np.stack([sig(mlp(x[i].mean((1, 2))) + mlp(x[i].max((1, 2))) - b2 + b2) for i in range(2)])
    T = torch.tensor
    out, mc = channel_attention(T(x), T(w1), T(b1), T(w2), T(b2))
    np.testing.assert_allclose(mc[:, :, 0, 0].numpy(), want_mc, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), x * want_mc[:, :, None, None], atol=1e-12)

    wc, bc = rng.normal(size=(1, 2, 3, 3)), rng.normal(size=1)
    pooled = np.stack([x.mean(1), x.max(1)], 1)  # (b, 2, H, W)
    padded = np.pad(pooled, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((2, 5, 4)) + bc[0]
    for i in range(5):
        for j in range(4):
            conv[:, i, j] += np.einsum("bcij,cij->b", padded[:, :, i:i + 3, j:j + 3], wc[0])
    out, ms = spatial_attention(T(x), T(wc), T(bc))
    np.testing.assert_allclose(ms[:, 0].numpy(), sig(conv), atol=1e-12)
    np.testing.assert_allclose(out.numpy(), x * sig(conv)[:, None], atol=1e-12)
    with pytest.raises(ValueError, match=r"\(b, C, H, W\)"):
        spatial_attention(T(x[0]), T(wc))


# name → (class, the registered defaults, constructor kwargs, an input)
SEQ = torch.randn(2, 9, 8, generator=torch.Generator().manual_seed(0))
IMG = torch.randn(2, 8, 5, 4, generator=torch.Generator().manual_seed(1))
REGISTERED = {
    "dot": ("DotProductAttention", {"scaled": False}, {}, (SEQ, SEQ)),
    "scaled-dot": ("DotProductAttention", {"scaled": True}, {}, (SEQ, SEQ)),
    "bahdanau": ("AdditiveAttention", {}, {"query_dim": 8, "key_dim": 8, "attn_dim": 4}, (SEQ, SEQ)),
    "luong-dot": ("LuongAttention", {"score": "dot"}, {"query_dim": 8, "key_dim": 8}, (SEQ, SEQ)),
    "luong-general": ("LuongAttention", {"score": "general"}, {"query_dim": 8, "key_dim": 8}, (SEQ, SEQ)),
    "luong-concat": ("LuongAttention", {"score": "concat"}, {"query_dim": 8, "key_dim": 8}, (SEQ, SEQ)),
    "multi-head": ("MultiHeadAttention", {}, {"dim": 8, "num_heads": 2}, (SEQ,)),
    "gqa": ("GroupedQueryAttention", {}, {"dim": 8, "num_heads": 4, "num_kv_heads": 2}, (SEQ,)),
    "cross": ("CrossAttention", {}, {"dim": 8, "num_heads": 2}, (SEQ, SEQ[:, :4])),
    "sparse": ("SparseAttention", {}, {"dim": 8, "num_heads": 2, "pattern": attnlab.patterns.causal()}, (SEQ,)),
    "local": ("LocalAttention", {}, {"dim": 8, "num_heads": 2, "window": 2}, (SEQ,)),
    "longformer": ("LongformerAttention", {}, {"dim": 8, "num_heads": 2, "window": 2}, (SEQ,)),
    "bigbird": ("BigBirdAttention", {}, {"dim": 8, "num_heads": 2, "window": 2, "random_block": 4}, (SEQ,)),
    "channel": ("ChannelAttention", {}, {"channels": 8, "reduction": 2}, (IMG,)),
    "spatial": ("SpatialAttention", {}, {"kernel_size": 3}, (IMG,)),
    "cbam": ("CBAM", {}, {"channels": 8, "reduction": 2}, (IMG,)),
    "se": ("SqueezeExcite", {}, {"channels": 8, "reduction": 2}, (IMG,)),
    "eca": ("ECA", {}, {"channels": 8}, (IMG,)),
    "softcap": ("SoftcapAttention", {}, {"cap": 5.0}, (SEQ, SEQ)),
    "linear": ("LinearAttention", {}, {"dim": 8, "num_heads": 2}, (SEQ,)),
    "differential": ("DifferentialAttention", {}, {"dim": 8, "num_heads": 2}, (SEQ,)),
    "mla": ("MultiHeadLatentAttention", {}, {"dim": 8, "num_heads": 2, "kv_latent_dim": 4, "rope_dim": 2}, (SEQ,)),
    "neighborhood-2d": ("NeighborhoodAttention2D", {}, {"dim": 8, "num_heads": 2, "kernel_size": 3}, (IMG,)),
    "target-attention": ("TargetAttention", {}, {"dim": 8}, (SEQ[:, 0], SEQ)),
    "sasrec-block": ("SASRecBlock", {}, {"dim": 8, "num_heads": 2}, (SEQ,)),
}


def _out(y):
    return y[0] if isinstance(y, tuple) else y


@pytest.mark.parametrize("name", sorted(REGISTERED))
def test_registry_builds_the_named_class_with_its_defaults(name):
    cls_name, defaults, kwargs, inputs = REGISTERED[name]
    cls = getattr(attnlab.nn, cls_name)
    torch.manual_seed(0)
    built = attnlab.create(name, **kwargs)
    torch.manual_seed(0)
    direct = cls(**defaults, **kwargs)
    assert type(built) is cls
    for k, v in defaults.items():
        assert getattr(built, k) == v
    assert built.state_dict().keys() == direct.state_dict().keys()
    y, want = _out(built(*inputs)), _out(direct(*inputs))
    assert y.shape == (inputs[0].shape[:2] + (8,) if inputs[0].dim() == 3 else inputs[0].shape)
    torch.testing.assert_close(y, want, rtol=0, atol=0)


def test_registry():
    assert attnlab.available() == sorted(REGISTERED)  # every registered name has a case above
    m = attnlab.create("dot")
    q = torch.randn(1, 2, 3)
    out, w = m(q, q, need_weights=True)
    torch.testing.assert_close(out, attnlab.attention(q, q, q, score="dot")[0])
    with pytest.raises(ValueError, match="unknown attention 'nope'"):
        attnlab.create("nope")
