"""Channel, spatial, CBAM, SE and ECA modules: defaults, hidden widths, biases, every argument message,
``need_weights``, and the documented parameter modules (``conv``, ``fc1``, ``fc2``) reproducing the maps,
against float64 NumPy written from Woo et al. 2018 (CBAM), Hu et al. 2018 (SE), Wang et al. 2020 (ECA)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.nn import CBAM, ECA, ChannelAttention, SpatialAttention, SqueezeExcite, create
from attnlab.nn.channel import CBAMMaps


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def mlp(z, fc1, fc2):
    p = {n: (None if t is None else t.detach().double().numpy()) for n, t in
         (("w1", fc1.weight), ("b1", fc1.bias), ("w2", fc2.weight), ("b2", fc2.bias))}
    hdn = np.maximum(z @ p["w1"].T + (0.0 if p["b1"] is None else p["b1"]), 0.0)
    return hdn @ p["w2"].T + (0.0 if p["b2"] is None else p["b2"])


def np_channel(x, m):  # M_c = σ(MLP(AvgPool F) + MLP(MaxPool F))
    mc = sigmoid(mlp(x.mean((2, 3)), m.fc1, m.fc2) + mlp(x.max((2, 3)), m.fc1, m.fc2))[:, :, None, None]
    return x * mc, mc


def np_spatial(x, m):  # M_s = σ(f^{k×k}([AvgPool_c F; MaxPool_c F])), zero padding k // 2
    w = m.conv.weight.detach().double().numpy()[0]
    bias = 0.0 if m.conv.bias is None else m.conv.bias.item()
    k, p = w.shape[-1], w.shape[-1] // 2
    pooled = np.concatenate([x.mean(1, keepdims=True), x.max(1, keepdims=True)], 1)
    b, _, H, W = x.shape
    padded = np.zeros((b, 2, H + 2 * p, W + 2 * p))
    padded[:, :, p : p + H, p : p + W] = pooled
    out = np.array([[[(padded[n, :, i : i + k, j : j + k] * w).sum() for j in range(W)] for i in range(H)] for n in range(b)])
    ms = sigmoid(out + bias)[:, None]
    return x * ms, ms


def np_eca(x, m):  # w = σ(C1D_k(AvgPool F)), zero padding k // 2 across channels
    w = m.conv.weight.detach().double().numpy().reshape(-1)
    k, c = len(w), x.shape[1]
    z = np.pad(x.mean((2, 3)), ((0, 0), (k // 2, k // 2)))
    s = sigmoid(np.stack([(z[:, i : i + k] * w).sum(1) for i in range(c)], 1))[:, :, None, None]
    return x * s, s


def x_of(b=2, c=8, h=3, w=4, seed=0):
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def randomise(module, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return module


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_channel_defaults_hidden_and_bias():
    m = ChannelAttention(64)
    assert (m.channels, m.reduction, m.hidden) == (64, 16, 4)
    assert m.fc1.weight.shape == (4, 64) and m.fc2.weight.shape == (64, 4)
    assert m.fc1.bias.shape == (4,) and m.fc2.bias.shape == (64,)
    assert m.extra_repr() == "channels=64, reduction=16, hidden=4"
    m = ChannelAttention(8, 2, hidden=5, bias=False)
    assert m.hidden == 5 and m.fc1.weight.shape == (5, 8) and m.fc1.bias is None and m.fc2.bias is None
    assert m.extra_repr() == "channels=8, reduction=2, hidden=5"
    assert ChannelAttention(8, hidden=1).hidden == 1


@pytest.mark.parametrize("cls", [ChannelAttention, SqueezeExcite, CBAM])
@pytest.mark.parametrize("bad", [0, -1, 2.0, "3"])
def test_hidden_message(cls, bad):
    assert message(lambda: cls(8, hidden=bad)) == f"hidden must be a positive int or None; got {bad!r}"


@pytest.mark.parametrize("bias", [True, False])
def test_channel_attention_without_and_with_bias_against_numpy(bias):
    m = randomise(ChannelAttention(6, 2, bias=bias).double())
    x = x_of(c=6)
    out, mc = m(x, need_weights=True)
    ref_out, ref_mc = np_channel(x.numpy(), m)
    np.testing.assert_allclose(mc.detach().numpy(), ref_mc, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-12)
    torch.testing.assert_close(m(x)[0], out)


@pytest.mark.parametrize("cls", [ChannelAttention, SqueezeExcite])
def test_channel_count_message(cls):
    m = cls(8, 2)
    assert message(lambda: m(x_of(c=6))) == f"{cls.__name__} was built for 8 channels; got a map of shape (2, 6, 3, 4) with C=6"
    with pytest.raises(ValueError) as e:  # not a map: the functional check names it
        m(torch.randn(2, 8, 3))
    assert "was built for" not in str(e.value)


def test_spatial_defaults_kernel_and_bias():
    m = SpatialAttention()
    assert m.kernel_size == 7 and m.conv.weight.shape == (1, 2, 7, 7) and m.conv.bias.shape == (1,)
    assert m.conv.padding == (3, 3) and m.extra_repr() == "kernel_size=7"
    m = SpatialAttention(1, bias=False)
    assert m.kernel_size == 1 and m.conv.bias is None and m.conv.padding == (0, 0)


@pytest.mark.parametrize("bad", [0, -3, 4, 3.0, "3"])
def test_spatial_kernel_message(bad):
    assert message(lambda: SpatialAttention(bad)) == (
        f"kernel_size must be a positive odd int (the map keeps its size); got {bad!r}")


@pytest.mark.parametrize("k,bias", [(3, True), (5, False)])
def test_spatial_attention_and_its_conv_module(k, bias):
    m = randomise(SpatialAttention(k, bias=bias).double())
    x = x_of(c=3, h=5, w=6)
    out, ms = m(x, need_weights=True)
    ref_out, ref_ms = np_spatial(x.numpy(), m)
    np.testing.assert_allclose(ms.detach().numpy(), ref_ms, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-12)
    torch.testing.assert_close(m(x)[0], out)
    pooled = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
    torch.testing.assert_close(torch.sigmoid(m.conv(pooled)), ms)  # the documented f^{k×k}


def test_cbam_defaults_arguments_and_maps():
    m = CBAM(32)
    assert m.channel.reduction == 16 and m.channel.hidden == 2 and m.spatial.kernel_size == 7
    assert m.channel.fc1.bias is not None and m.spatial.conv.bias is not None
    m = CBAM(8, 4, 3, hidden=3, bias=False)
    assert m.channel.hidden == 3 and m.channel.reduction == 4 and m.spatial.kernel_size == 3
    assert m.channel.fc1.bias is None and m.spatial.conv.bias is None
    randomise(m.double())
    x = x_of(c=8, h=4, w=5)
    out, maps = m(x, need_weights=True)
    assert isinstance(maps, CBAMMaps)
    f1, mc = np_channel(x.numpy(), m.channel)
    f2, ms = np_spatial(f1, m.spatial)
    np.testing.assert_allclose(maps.channel.detach().numpy(), mc, rtol=1e-12)
    np.testing.assert_allclose(maps.spatial.detach().numpy(), ms, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), f2, rtol=1e-12)
    plain, none = m(x)
    assert none is None
    torch.testing.assert_close(plain, out)


def test_se_defaults_bias_and_need_weights():
    m = SqueezeExcite(64)
    assert (m.reduction, m.hidden) == (16, 4) and m.fc1.bias is not None
    m = randomise(SqueezeExcite(6, 3, hidden=4, bias=False).double())
    assert m.hidden == 4 and m.fc1.bias is None and m.fc2.bias is None
    x = x_of(c=6)
    out, s = m(x, need_weights=True)
    s_ref = sigmoid(mlp(x.numpy().mean((2, 3)), m.fc1, m.fc2))[:, :, None, None]
    np.testing.assert_allclose(s.detach().numpy(), s_ref, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), x.numpy() * s_ref, rtol=1e-12)
    plain, none = m(x)
    assert none is None
    torch.testing.assert_close(plain, out)


def test_eca_kernel_size_gamma_beta_and_conv():
    m = ECA(16)
    assert m.kernel_size == 3 and m.channels == 16  # |(4 + 1) / 2|_odd = 3
    assert m.conv.weight.shape == (1, 1, 3) and m.conv.bias is None and m.conv.padding == (1,)
    assert m.extra_repr() == "channels=16, kernel_size=3"
    # ψ(C) = |(log₂ C + b) / γ|_odd by hand: C = 4 → (2 + 1) / 2 = 1.5 → 1; C = 256, γ = 1 → 9; b = 3 → 5.5 → 5
    assert ECA(4).kernel_size == 1
    assert ECA(256, gamma=1).kernel_size == 9
    assert ECA(256, beta=3).kernel_size == 5
    assert ECA(256, gamma=3, beta=4).kernel_size == 5  # (8 + 4) / 3 = 4 → 5
    m = ECA(10, kernel_size=5)
    assert m.kernel_size == 5 and m.conv.padding == (2,) and m.extra_repr() == "channels=10, kernel_size=5"
    assert ECA(4, kernel_size=1).kernel_size == 1


@pytest.mark.parametrize("bad", [0, 2, -1, 3.0])
def test_eca_kernel_message(bad):
    assert message(lambda: ECA(16, kernel_size=bad)) == (
        f"kernel_size must be a positive odd int or None (adaptive); got {bad!r}")


def test_eca_against_numpy_and_its_conv_module():
    m = randomise(ECA(6, kernel_size=3).double())
    x = x_of(c=6)
    out, s = m(x, need_weights=True)
    ref_out, ref_s = np_eca(x.numpy(), m)
    np.testing.assert_allclose(s.detach().numpy(), ref_s, rtol=1e-12)
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-12)
    plain, none = m(x)
    assert none is None
    torch.testing.assert_close(plain, out)
    z = x.mean((2, 3))[:, None, :]  # (b, 1, C)
    torch.testing.assert_close(torch.sigmoid(m.conv(z))[:, 0, :, None, None], s)  # the documented C1D_k


def test_registry_names():
    for name, cls in (("channel", ChannelAttention), ("spatial", SpatialAttention), ("cbam", CBAM),
                      ("se", SqueezeExcite), ("eca", ECA)):
        assert type(create(name, **({} if name == "spatial" else {"channels": 8}))) is cls
    assert math.isclose(ECA(2048).kernel_size, 7)
