"""Channel, spatial, CBAM, SE and ECA against float64 NumPy implementations of the papers' equations."""

import math

import numpy as np
import pytest
import torch

import attnlab
import attnlab.functional as AF
from attnlab.nn import CBAM, ECA, ChannelAttention, SpatialAttention, SqueezeExcite

# --- NumPy references, written from the papers' equations ------------------------------


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def np_mlp(z, w1, b1, w2, b2):  # z (b, C)
    h = np.maximum(z @ w1.T + b1, 0.0)
    return h @ w2.T + b2


def np_channel(x, w1, b1, w2, b2):
    avg, mx = x.mean(axis=(2, 3)), x.max(axis=(2, 3))
    m = sigmoid(np_mlp(avg, w1, b1, w2, b2) + np_mlp(mx, w1, b1, w2, b2))[:, :, None, None]
    return x * m, m


def np_conv2d_same(inp, w, bias):  # inp (b, 2, H, W), w (1, 2, k, k): cross-correlation, zero padding
    b, c, h, wd = inp.shape
    k = w.shape[-1]
    p = k // 2
    pad = np.zeros((b, c, h + 2 * p, wd + 2 * p))
    pad[:, :, p : p + h, p : p + wd] = inp
    out = np.zeros((b, 1, h, wd))
    for i in range(h):
        for j in range(wd):
            out[:, 0, i, j] = (pad[:, :, i : i + k, j : j + k] * w[0]).sum(axis=(1, 2, 3))
    return out + bias.reshape(1, 1, 1, 1)


def np_spatial(x, w, bias):
    pooled = np.concatenate([x.mean(axis=1, keepdims=True), x.max(axis=1, keepdims=True)], axis=1)
    m = sigmoid(np_conv2d_same(pooled, w, bias))
    return x * m, m


def np_se(x, w1, b1, w2, b2):
    s = sigmoid(np_mlp(x.mean(axis=(2, 3)), w1, b1, w2, b2))[:, :, None, None]
    return x * s, s


def np_eca(x, w):  # w (k,)
    z = x.mean(axis=(2, 3))  # (b, C)
    k, c = len(w), z.shape[1]
    p = k // 2
    zp = np.pad(z, ((0, 0), (p, p)))
    y = np.stack([(zp[:, i : i + k] * w).sum(axis=1) for i in range(c)], axis=1)
    s = sigmoid(y)[:, :, None, None]
    return x * s, s


def np_(t):
    return t.detach().double().numpy()


def rand_map(b=2, c=6, h=5, w=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, c, h, w, generator=g)


def randomise(module, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module


# --- equations --------------------------------------------------------------------------


@pytest.mark.parametrize("c,h,w", [(6, 5, 7), (32, 4, 4), (3, 1, 9)])
def test_channel_attention_matches_numpy(c, h, w):
    m = randomise(ChannelAttention(c, reduction=4))
    x = rand_map(c=c, h=h, w=w)
    out, mc = m(x, need_weights=True)
    ref_out, ref_m = np_channel(np_(x), np_(m.fc1.weight), np_(m.fc1.bias), np_(m.fc2.weight), np_(m.fc2.bias))
    assert mc.shape == (2, c, 1, 1)
    np.testing.assert_allclose(np_(mc), ref_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(out), ref_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k,h,w", [(7, 5, 7), (3, 9, 3), (1, 4, 6)])
def test_spatial_attention_matches_numpy(k, h, w):
    m = randomise(SpatialAttention(k))
    x = rand_map(h=h, w=w)
    out, ms = m(x, need_weights=True)
    ref_out, ref_m = np_spatial(np_(x), np_(m.conv.weight), np_(m.conv.bias))
    assert ms.shape == (2, 1, h, w)
    np.testing.assert_allclose(np_(ms), ref_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(out), ref_out, rtol=1e-5, atol=1e-6)


def test_cbam_is_channel_then_spatial():
    m = randomise(CBAM(8, reduction=2, kernel_size=3))
    x = rand_map(c=8, h=7, w=5)
    out, maps = m(x, need_weights=True)
    ca = m.channel
    f1, ref_mc = np_channel(np_(x), np_(ca.fc1.weight), np_(ca.fc1.bias), np_(ca.fc2.weight), np_(ca.fc2.bias))
    f2, ref_ms = np_spatial(f1, np_(m.spatial.conv.weight), np_(m.spatial.conv.bias))
    np.testing.assert_allclose(np_(maps.channel), ref_mc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(maps.spatial), ref_ms, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(out), f2, rtol=1e-5, atol=1e-6)
    assert maps.channel.shape == (2, 8, 1, 1) and maps.spatial.shape == (2, 1, 7, 5)
    # the functional form agrees
    f_out, f_mc, f_ms = AF.cbam(
        x, ca.fc1.weight, ca.fc1.bias, ca.fc2.weight, ca.fc2.bias, m.spatial.conv.weight, m.spatial.conv.bias
    )
    torch.testing.assert_close(f_out, out)
    torch.testing.assert_close(f_ms, maps.spatial)


def test_se_matches_numpy():
    m = randomise(SqueezeExcite(12, reduction=4))
    x = rand_map(c=12, h=3, w=5)
    out, s = m(x, need_weights=True)
    ref_out, ref_s = np_se(np_(x), np_(m.fc1.weight), np_(m.fc1.bias), np_(m.fc2.weight), np_(m.fc2.bias))
    np.testing.assert_allclose(np_(s), ref_s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(out), ref_out, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("c,k", [(16, 3), (10, 5), (2, 3), (64, None)])
def test_eca_matches_numpy(c, k):
    m = randomise(ECA(c, kernel_size=k))
    x = rand_map(c=c, h=5, w=3)
    out, s = m(x, need_weights=True)
    ref_out, ref_s = np_eca(np_(x), np_(m.conv.weight).reshape(-1))
    np.testing.assert_allclose(np_(s), ref_s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np_(out), ref_out, rtol=1e-5, atol=1e-6)


def test_eca_adaptive_kernel_size_follows_the_paper():
    # ψ(C) = |(log2 C + b) / γ|_odd with γ = 2, b = 1, written independently here
    for c in [1, 2, 3, 8, 16, 64, 100, 256, 512, 1024, 2048]:
        t = int(abs((math.log(c, 2) + 1) / 2))
        expected = t if t % 2 == 1 else t + 1
        assert AF.eca_kernel_size(c) == expected
        assert ECA(c).kernel_size == expected
    assert ECA(256).kernel_size == 5  # the paper's ResNet-50 stages: C = 256 → k = 5
    assert ECA(2048).kernel_size == 7


# --- maps, shapes, gradients, rules ----------------------------------------------------

MODULES = {
    "channel": lambda c: ChannelAttention(c, reduction=4),
    "spatial": lambda c: SpatialAttention(5),
    "cbam": lambda c: CBAM(c, reduction=4, kernel_size=3),
    "se": lambda c: SqueezeExcite(c, reduction=4),
    "eca": lambda c: ECA(c),
}


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("hw", [(1, 1), (5, 9), (7, 3)])
def test_maps_in_unit_interval_shapes_and_gradients(name, hw):
    m = randomise(MODULES[name](8))
    for fc1 in [mod for n, mod in m.named_modules() if n.endswith("fc1")]:
        with torch.no_grad():
            fc1.bias.fill_(1.0)  # keep the hidden ReLUs alive so every weight gets a gradient
    x = (rand_map(c=8, h=hw[0], w=hw[1]) * 3).requires_grad_()
    out, maps = m(x, need_weights=True)
    plain, none = m(x)  # one type whatever the flag: (out, maps or None)
    assert none is None and plain.shape == x.shape == out.shape
    torch.testing.assert_close(plain, out)
    for mp in maps if isinstance(maps, tuple) else (maps,):
        assert mp.min() >= 0 and mp.max() <= 1
        assert mp.shape in ((2, 8, 1, 1), (2, 1, *hw))
    (out.square().sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for pname, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {pname}"


@pytest.mark.parametrize("c,r,expected", [(64, 16, 4), (16, 16, 1), (4, 16, 1), (1, 16, 1), (33, 8, 4)])
def test_channels_smaller_than_reduction_keep_one_hidden_unit(c, r, expected):
    assert AF.reduced_channels(c, r) == expected == max(1, c // r)
    for cls in (ChannelAttention, SqueezeExcite):
        m = cls(c, reduction=r)
        assert m.fc1.out_features == expected
        x = rand_map(c=c, h=3, w=3)
        assert m(x)[0].shape == x.shape
    assert CBAM(4, hidden=3).channel.hidden == 3


def test_registry_builds_every_vision_module():
    x = rand_map(c=16)
    for name, kw in {"channel": {"channels": 16}, "spatial": {}, "cbam": {"channels": 16},
                     "se": {"channels": 16}, "eca": {"channels": 16}}.items():
        m = attnlab.create(name, **kw)
        assert m(x)[0].shape == x.shape


def test_trace_records_the_steps():
    m = randomise(SqueezeExcite(8, reduction=2))
    x = rand_map(c=8)
    with attnlab.trace() as t:
        out, s = m(x, need_weights=True)
    assert t.names() == ["squeeze", "mlp", "weights", "output"]
    torch.testing.assert_close(t["weights"].value, s)
    with attnlab.trace() as t:
        ECA(8)(x)
    assert t.names() == ["avg_pool", "conv", "weights", "output"]


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="built for 8 channels"):
        ChannelAttention(8)(rand_map(c=6))
    with pytest.raises(ValueError, match=r"\(b, C, H, W\)"):
        SpatialAttention()(torch.randn(2, 3, 4))
    with pytest.raises(ValueError, match="odd"):
        SpatialAttention(4)
    with pytest.raises(ValueError, match="odd"):
        ECA(16, kernel_size=2)
    with pytest.raises(ValueError, match="reduction"):
        ChannelAttention(8, reduction=0)
    with pytest.raises(ValueError, match="channels"):
        SqueezeExcite(0)
    with pytest.raises(ValueError, match=r"w2 must have shape"):
        AF.se(rand_map(c=4), torch.randn(2, 4), None, torch.randn(3, 2), None)
