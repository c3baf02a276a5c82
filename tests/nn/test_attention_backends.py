"""Attention backends as values: each one through ``MultiHeadAttention`` equals masked softmax attention
written here in float64 NumPy; swapping a built module's backend changes nothing else; the functional
``multi_head_attention`` and the module agree on padded query rows; the backends' reprs."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab.patterns as P
from attnlab.functional import multi_head_attention
from attnlab.nn import MultiHeadAttention
from attnlab.nn.backends import BlockSparse, ContextParallel, Dense


def randomised(m: MultiHeadAttention) -> MultiHeadAttention:
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return m


def reference(m: MultiHeadAttention, x: np.ndarray, allow: np.ndarray, pad: np.ndarray | None) -> np.ndarray:
    """Self-attention in float64 NumPy: x (b, n, dim), allow (b, n, n) True = may attend, pad (b, n) True = real
    token (its outputs are zero otherwise); a query with nothing allowed has a zero context."""
    w = m.in_proj_weight.detach().double().numpy()
    bias = m.in_proj_bias.detach().double().numpy()
    h, h_kv, d_h = m.num_heads, m.num_kv_heads, m.head_dim
    b, n, _ = x.shape
    q_out, kv_out = h * d_h, h_kv * d_h
    q = (x @ w[:q_out].T + bias[:q_out]).reshape(b, n, h, d_h)
    k = (x @ w[q_out:q_out + kv_out].T + bias[q_out:q_out + kv_out]).reshape(b, n, h_kv, d_h)
    v = (x @ w[q_out + kv_out:].T + bias[q_out + kv_out:]).reshape(b, n, h_kv, d_h)
    ctx = np.zeros((b, n, h, d_h))
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // h_kv)
            for i in range(n):
                ok = allow[bi, i]
                if not ok.any():
                    continue
                s = q[bi, i, hi] @ k[bi][ok, g].T / np.sqrt(d_h)
                e = np.exp(s - s.max())
                ctx[bi, i, hi] = (e / e.sum()) @ v[bi][ok, g]
    out = ctx.reshape(b, n, h * d_h) @ m.out_proj.weight.detach().double().numpy().T
    out = out + m.out_proj.bias.detach().double().numpy()
    if pad is not None:
        out[~pad] = 0.0
    return out


def inputs(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    x = torch.randn(2, n, 8, dtype=torch.float64)
    pad = torch.ones(2, n, dtype=torch.bool)
    pad[1, n - 2:] = False  # the second sequence's last two tokens are padding
    return x, pad


def allowed(pad: torch.Tensor, causal: bool, window: int | None = None) -> np.ndarray:
    n = pad.shape[1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allow = np.broadcast_to(pad.numpy()[:, None, :], (pad.shape[0], n, n)).copy()
    if causal:
        allow &= (j <= i)[None]
    if window is not None:
        allow &= (np.abs(i - j) <= window)[None]
    return allow


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend,window", [(Dense(), None), (BlockSparse(P.sliding_window(1), block=4), 1)],
                         ids=["dense", "block-sparse"])
def test_each_backend_through_the_module_equals_numpy(backend, window, causal):
    m = randomised(MultiHeadAttention(8, 2, num_kv_heads=1, backend=backend).double())
    x, pad = inputs()
    out, _ = m(x, mask=pad, causal=causal)
    want = reference(m, x.numpy(), allowed(pad, causal, window), pad.numpy())
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_context_parallel_backend_on_one_process_equals_numpy(one_process_group, causal):
    m = randomised(MultiHeadAttention(8, 2, backend=ContextParallel(mode="ulysses")).double())
    x, pad = inputs()
    out, _ = m(x, mask=pad, causal=causal)
    want = reference(m, x.numpy(), allowed(pad, causal), pad.numpy())
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10, rtol=0)


def test_context_parallel_reads_a_two_dimensional_mask_as_padding_even_when_b_equals_n(one_process_group):
    """A (b, n/W) mask with b = n/W is this rank's padding mask, never the ambiguous (q, k) reading."""
    m = randomised(MultiHeadAttention(8, 2, backend=ContextParallel()).double())
    x, pad = inputs(2)
    pad[1, 1] = False
    out, _ = m(x, mask=pad, causal=True)
    want = reference(m, x.numpy(), allowed(pad, True), pad.numpy())
    np.testing.assert_allclose(out.detach().numpy(), want, atol=1e-10, rtol=0)


def test_swapping_the_backend_keeps_the_parameters_and_equals_building_with_it():
    torch.manual_seed(5)
    swapped = randomised(MultiHeadAttention(8, 2).double())
    before = {k: v.clone() for k, v in swapped.state_dict().items()}
    built = MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(2), block=4)).double()
    built.load_state_dict(before)
    swapped.backend = BlockSparse(P.sliding_window(2), block=4)
    after = swapped.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    x, pad = inputs(8)
    for kw in ({}, {"mask": pad}, {"mask": pad, "causal": True}):
        torch.testing.assert_close(swapped(x, **kw)[0], built(x, **kw)[0], rtol=0, atol=0)
    np.testing.assert_allclose(swapped(x, mask=pad)[0].detach().numpy(),
                               reference(swapped, x.numpy(), allowed(pad, False, 2), pad.numpy()), atol=1e-12)
    swapped.backend = Dense()  # and back: dense again
    np.testing.assert_allclose(swapped(x, mask=pad)[0].detach().numpy(),
                               reference(swapped, x.numpy(), allowed(pad, False), pad.numpy()), atol=1e-12)


def test_functional_and_module_agree_on_padded_query_rows():
    m = randomised(MultiHeadAttention(8, 2).double())
    x, pad = inputs()
    x[1, 4:] = float("nan")  # padded tokens' inputs never reach anything
    w = m.projection_weights()
    for mask in (pad, pad[:, None, None, :]):
        f_out, f_w = multi_head_attention(x, x, x, w, num_heads=2, mask=mask, need_weights=True)
        m_out, m_w = m(x, mask=mask, need_weights=True)
        torch.testing.assert_close(f_out, m_out, rtol=0, atol=1e-14)
        torch.testing.assert_close(f_w, m_w, rtol=0, atol=1e-14)
        assert torch.equal(f_out[1, 4:], torch.zeros(2, 8, dtype=torch.float64))
        assert torch.equal(f_w[1, :, 4:], torch.zeros(2, 2, 6, dtype=torch.float64))
        np.testing.assert_allclose(f_out.detach().numpy(), reference(m, x.nan_to_num(0.0).numpy(),
                                                                     allowed(pad, False), pad.numpy()), atol=1e-12)


def test_backend_reprs_name_what_they_hold():
    assert repr(Dense()) == "Dense()"
    assert repr(BlockSparse(P.sliding_window(2, 0), block=8)) == "BlockSparse(sliding_window(2, 0), block=8)"
    assert repr(ContextParallel()) == "ContextParallel(group=None, mode='ring', layout='contiguous')"
    assert repr(ContextParallel(mode="ulysses", layout="zigzag", pattern=P.sliding_window(1))) == (
        "ContextParallel(group=None, mode='ulysses', layout='zigzag', pattern=sliding_window(1, 1))")
    m = MultiHeadAttention(8, 2)
    assert m.extra_repr() == "dim=8, num_heads=2"
    m.backend = BlockSparse(P.sliding_window(1), block=4)
    assert m.extra_repr() == "dim=8, num_heads=2, backend=BlockSparse(sliding_window(1, 1), block=4)"


def test_the_default_backend_is_dense_and_the_old_arguments_are_gone():
    assert isinstance(MultiHeadAttention(8, 2).backend, Dense)
    for old in ("pattern", "block", "context_parallel", "cp_mode", "cp_layout"):
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{old}'"):
            MultiHeadAttention(8, 2, **{old: None})
        assert not hasattr(MultiHeadAttention(8, 2), old)


def test_backend_refusals_say_what_was_given():
    with pytest.raises(ValueError, match="^" + re.escape(
            "backend must be an attnlab.nn.backends.Backend (Dense(), BlockSparse(pattern), ContextParallel(group)); "
            "got str") + "$"):
        MultiHeadAttention(8, 2, backend="dense")
    m = MultiHeadAttention(8, 2, alibi=True)
    with pytest.raises(ValueError, match="^" + re.escape(
            "pattern= and alibi=True do not combine: the block-sparse kernel adds no bias") + "$"):
        m.backend = BlockSparse(P.sliding_window(1))
    assert isinstance(m.backend, Dense)  # a refused swap leaves the backend as it was
    extra = MultiHeadAttention(8, 2, add_zero_attn=True)
    with pytest.raises(ValueError, match=re.escape("got backend=BlockSparse(sliding_window(1, 1), block=64), "
                                                   "rope=False, alibi=False")):
        extra.backend = BlockSparse(P.sliding_window(1))
