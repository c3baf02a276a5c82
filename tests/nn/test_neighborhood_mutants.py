"""NeighborhoodAttention2D: defaults, every argument message, head layout and ``need_weights``, against a
float64 per-pixel loop over NATTEN's windows (Hassani et al. 2023) with the module's weights copied."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.nn import NeighborhoodAttention2D

from np_reference import natten_mask

pytestmark = pytest.mark.usefixtures("one_thread")


def reference(m, x, kernel, dilation):
    P = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    b, C, H, W = x.shape
    h, d = m.num_heads, C // m.num_heads
    mask = natten_mask(H, W, kernel, dilation)
    t = x.permute(0, 2, 3, 1).reshape(b, H * W, C).numpy()
    qkv = t @ P["qkv.weight"].T + P.get("qkv.bias", 0.0)
    q, k, v = qkv[..., :C], qkv[..., C : 2 * C], qkv[..., 2 * C :]
    out = np.zeros_like(q)
    weights = np.zeros((b, h, H * W, H * W))
    for n in range(b):
        for hd in range(h):
            s = slice(hd * d, (hd + 1) * d)
            for i in range(H * W):
                js = np.nonzero(mask[i])[0]
                e = k[n, js, s] @ q[n, i, s] / np.sqrt(d)
                a = np.exp(e - e.max())
                a /= a.sum()
                weights[n, hd, i, js] = a
                out[n, i, s] = a @ v[n, js, s]
    y = (out @ P["proj.weight"].T + P["proj.bias"]).reshape(b, H, W, C).transpose(0, 3, 1, 2)
    return y, weights


def message(call):
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def test_defaults():
    m = NeighborhoodAttention2D(8)
    assert (m.dim, m.num_heads, m.head_dim, m.kernel_size, m.dilation, m.block) == (8, 4, 2, 7, 1, 64)
    assert m.qkv.weight.shape == (24, 8) and m.qkv.bias.shape == (24,)
    assert m.proj.weight.shape == (8, 8) and m.proj.bias.shape == (8,)
    assert m.extra_repr() == "dim=8, num_heads=4, kernel_size=7, dilation=1"
    m = NeighborhoodAttention2D(6, 3, kernel_size=1, dilation=2, qkv_bias=False, block=8)
    assert (m.head_dim, m.kernel_size, m.dilation, m.block) == (2, 1, 2, 8) and m.qkv.bias is None
    assert m.extra_repr() == "dim=6, num_heads=3, kernel_size=1, dilation=2"


@pytest.mark.parametrize("dim,heads", [(0, 1), (8, 0), (8, 3), (-4, 2)])
def test_dim_message(dim, heads):
    assert message(lambda: NeighborhoodAttention2D(dim, heads)) == (
        f"dim (channels C) must be a positive multiple of num_heads; got dim={dim}, num_heads={heads}")


@pytest.mark.parametrize("kernel,dilation", [(0, 1), (4, 1), (-1, 1), (3, 0), (3, -1)])
def test_kernel_message(kernel, dilation):
    assert message(lambda: NeighborhoodAttention2D(4, 2, kernel_size=kernel, dilation=dilation)) == (
        f"kernel_size must be odd and >= 1, dilation >= 1; got {kernel}, {dilation}")


def test_smallest_module_builds():
    m = NeighborhoodAttention2D(1, 1, kernel_size=1, dilation=1)
    x = torch.randn(1, 1, 2, 2)
    y, _ = m(x)  # a 1 × 1 window: each pixel attends itself, y = W_o (W_v x) + …
    ref = (x.permute(0, 2, 3, 1) @ m.qkv.weight[2:].T + m.qkv.bias[2:]) @ m.proj.weight.T + m.proj.bias
    torch.testing.assert_close(y, ref.permute(0, 3, 1, 2))


@pytest.mark.parametrize("shape", [(8, 5, 5), (1, 6, 5, 5), (1, 8, 5, 5, 1)])
def test_input_message(shape):
    m = NeighborhoodAttention2D(8, 2, kernel_size=3)
    assert message(lambda: m(torch.randn(*shape))) == (
        f"x must be a (b, C, H, W) map with C=8; got shape {shape}")


@pytest.mark.parametrize("heads,kernel,dilation,hw", [(2, 3, 1, (4, 5)), (3, 3, 2, (6, 7)), (1, 5, 1, (5, 5))])
def test_module_against_the_loop(heads, kernel, dilation, hw):
    torch.manual_seed(0)
    m = NeighborhoodAttention2D(6, heads, kernel_size=kernel, dilation=dilation, qkv_bias=False, block=8).double()
    x = torch.randn(2, 6, *hw, dtype=torch.float64)
    y_ref, w_ref = reference(m, x, kernel, dilation)
    y, w = m(x, need_weights=True)
    np.testing.assert_allclose(y.detach().numpy(), y_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(w.detach().numpy(), w_ref, rtol=1e-9, atol=1e-12)
    y_fast, none = m(x)
    assert none is None
    torch.testing.assert_close(y_fast, y)


def test_the_modules_block_reaches_the_kernel():
    """``block`` is the kernel's tile size; the module passes its own, so the kernel refuses a bad one."""
    m = NeighborhoodAttention2D(4, 2, kernel_size=3, block=0)
    with pytest.raises(ValueError) as e:
        m(torch.randn(1, 4, 3, 3))
    assert str(e.value) == "block must be a positive integer; got 0"
