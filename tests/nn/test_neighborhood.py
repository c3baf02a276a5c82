"""2-D neighbourhood attention: the pattern against NATTEN's window rule (written here from NATTEN's
``get_window_start``), the module against a float64 per-pixel loop with copied weights, the kernel
computes only the pattern's tiles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab import patterns
from attnlab.kernels import plan
from attnlab.kernels.neighborhood import neighborhood_attention_2d
from attnlab.nn import NeighborhoodAttention2D, create

from np_reference import natten_mask

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("H,W,kernel,dilation", [(7, 9, 3, 1), (8, 8, 5, 1), (12, 10, 3, 2), (13, 11, 3, 3), (9, 9, 7, 1)])
def test_pattern_is_nattens_window(H, W, kernel, dilation):
    p = patterns.neighborhood_2d(H, W, kernel, dilation)
    got = p.materialize(H * W).numpy()
    assert (got == natten_mask(H, W, kernel, dilation)).all()
    assert (got.sum(1) == kernel * kernel).all()  # every pixel sees exactly k² keys
    for block in (8, 16):
        lay = p.block_layout(H * W, block)
        nb = lay.shape[0]
        pad = np.zeros((nb * block, nb * block), dtype=bool)
        pad[: H * W, : H * W] = got
        tiles = torch.from_numpy(pad.reshape(nb, block, nb, block).any(3).any(1))
        assert bool((lay | ~tiles).all())  # the layout covers every non-empty tile
        assert plan(p, H * W, block).nnz_blocks == int(tiles.sum())  # and the kernel visits only those


def test_module_against_per_pixel_loop():
    torch.manual_seed(0)
    m = NeighborhoodAttention2D(8, 2, kernel_size=3, dilation=2, block=16).double()
    x = torch.randn(2, 8, 6, 7, dtype=torch.float64)
    y, _ = m(x)
    P = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    H, W = 6, 7
    mask = natten_mask(H, W, 3, 2)
    t = x.permute(0, 2, 3, 1).reshape(2, H * W, 8).numpy()
    qkv = t @ P["qkv.weight"].T + P["qkv.bias"]
    q, k, v = qkv[..., :8], qkv[..., 8:16], qkv[..., 16:]
    out = np.zeros_like(q)
    for b in range(2):
        for hd in range(2):
            s = slice(hd * 4, hd * 4 + 4)
            for i in range(H * W):
                js = np.nonzero(mask[i])[0]
                e = k[b, js, s] @ q[b, i, s] / 2.0
                a = np.exp(e - e.max())
                out[b, i, s] = (a / a.sum()) @ v[b, js, s]
    ref = (out @ P["proj.weight"].T + P["proj.bias"]).reshape(2, H, W, 8).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-9, atol=1e-10)
    slow, w = m(x, need_weights=True)
    torch.testing.assert_close(slow, y)
    assert w.shape == (2, 2, 42, 42) and bool(((w > 0) <= torch.from_numpy(mask)).all())


def test_gradients_equal_dense_masked_reference():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out, _ = neighborhood_attention_2d(q, k, v, kernel=3, block=8)
    mask = torch.from_numpy(natten_mask(5, 6, 3, 1))
    e = (q.flatten(2, 3) @ k.flatten(2, 3).transpose(-1, -2) / 2.0).masked_fill(~mask, float("-inf"))
    ref = (torch.softmax(e, -1) @ v.flatten(2, 3)).unflatten(2, (5, 6))
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad((out * g).sum(), (q, k, v)), torch.autograd.grad((ref * g).sum(), (q, k, v))):
        torch.testing.assert_close(a, b)


def test_keys_outside_the_window_never_influence_and_registry():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 1, 5, 5, 4, dtype=torch.float64) for _ in range(3))
    base, _ = neighborhood_attention_2d(q, k, v, kernel=3, block=8)
    k2, v2 = k.clone(), v.clone()
    k2[..., 4, 4, :], v2[..., 4, 4, :] = float("nan"), float("inf")  # pixel (4, 4) is outside (0, 0)'s window
    dirty, _ = neighborhood_attention_2d(q, k2, v2, kernel=3, block=8)
    torch.testing.assert_close(dirty[..., 0, 0, :], base[..., 0, 0, :])
    assert torch.isnan(dirty[..., 4, 4, :]).all()  # a query that may attend a NaN key: NaN, as in the core
    m = create("neighborhood-2d", dim=8, num_heads=2, kernel_size=3)
    assert m(torch.randn(1, 8, 0, 4))[0].shape == (1, 8, 0, 4)
    with pytest.raises(ValueError, match="odd"):
        patterns.neighborhood_2d(4, 4, 2)


# NeighborhoodAttention2D: defaults, every argument message, head layout and ``need_weights``, against a
# float64 per-pixel loop over NATTEN's windows (Hassani et al. 2023) with the module's weights copied.
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
