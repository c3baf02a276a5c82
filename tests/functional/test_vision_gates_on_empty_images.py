"""The vision gates on an empty image (H or W = 0) or an empty batch give an empty result of the
right shape: the gated map keeps the input's shape, a spatial map is (b, 1, H, W), and a channel
gate (b, C, 1, 1) is the gate of zero pooled features (the mean or maximum of no pixel reads as 0,
as a fully masked attention row gives 0), finite, computed here by hand."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab import functional as AF

SHAPES = [(2, 4, 0, 3), (2, 4, 3, 0), (2, 4, 0, 0), (0, 4, 3, 3), (0, 4, 0, 0)]


def _mlp_params():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g) for s in ((2, 4), (2,), (4, 2), (4,))]


def _gate_of_zero(w1, b1, w2, b2, twice: bool) -> torch.Tensor:
    """σ(MLP(0)) (SE) or σ(MLP(0) + MLP(0)) (CBAM's channel gate): (C,)."""
    one = w2 @ torch.relu(b1) + b2
    return torch.sigmoid(2 * one if twice else one)


@pytest.mark.parametrize("shape", SHAPES)
def test_channel_and_se_gates_of_an_empty_image(shape):
    b, c, h, w = shape
    x = torch.randn(shape, requires_grad=True)
    w1, b1, w2, b2 = _mlp_params()
    for fn, twice in ((AF.channel_attention, True), (AF.se, False)):
        out, gate = fn(x, w1, b1, w2, b2)
        assert out.shape == shape and gate.shape == (b, c, 1, 1)
        torch.testing.assert_close(gate, _gate_of_zero(w1, b1, w2, b2, twice).view(1, c, 1, 1).expand(b, c, 1, 1))
        out.sum().backward()
        assert x.grad.shape == shape


@pytest.mark.parametrize("shape", SHAPES)
def test_spatial_cbam_and_eca_of_an_empty_image(shape):
    b, c, h, w = shape
    x = torch.randn(shape)
    out, m_s = AF.spatial_attention(x, torch.randn(1, 2, 3, 3), torch.randn(1))
    assert out.shape == shape and m_s.shape == (b, 1, h, w)
    w1, b1, w2, b2 = _mlp_params()
    out, m_c, m_s = AF.cbam(x, w1, b1, w2, b2, torch.randn(1, 2, 3, 3))
    assert out.shape == shape and m_c.shape == (b, c, 1, 1) and m_s.shape == (b, 1, h, w)
    weight = torch.tensor([[[0.5, -1.0, 2.0]]])
    out, gate = AF.eca(x, weight)
    assert out.shape == shape and gate.shape == (b, c, 1, 1)
    assert torch.all(gate == 0.5)  # σ(conv1d(0)) = σ(0): no bias


@pytest.mark.parametrize("name,kw", [("channel", dict(channels=4, reduction=2)), ("spatial", dict(kernel_size=3)),
                                     ("cbam", dict(channels=4, reduction=2, kernel_size=3)),
                                     ("se", dict(channels=4, reduction=2)), ("eca", dict(channels=4, kernel_size=3))])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_modules_give_an_empty_map_of_the_input_shape(name, kw, shape):
    out, maps = attnlab.create(name, **kw)(torch.randn(shape), need_weights=True)
    assert out.shape == shape
    for m in (maps if isinstance(maps, tuple) else (maps,)):
        assert m.shape[0] == shape[0] and bool(torch.isfinite(m).all())


def test_a_non_empty_image_is_pooled_as_before():
    x = torch.arange(24.0).view(1, 2, 3, 4)
    w1, b1, w2, b2 = (torch.eye(2), torch.zeros(2), torch.eye(2), torch.zeros(2))
    _, gate = AF.se(x, w1, b1, w2, b2)
    torch.testing.assert_close(gate.flatten(), torch.sigmoid(torch.tensor([5.5, 17.5])))
