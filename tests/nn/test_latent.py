"""Multi-head latent attention (DeepSeek-V2) against a float64 NumPy reference written from eqs. 9–19
with the module's weights copied; cached decoding == recomputation; the cache's size per token."""

from __future__ import annotations

import contract_modern as contract
import numpy as np
import pytest
import torch

from attnlab.functional.latent import latent_attention
from attnlab.nn import LatentCache, MultiHeadLatentAttention, create

pytestmark = pytest.mark.usefixtures("one_thread")


def rms(x, w, eps=1e-6):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, base=10000.0):
    """RoFormer: rotate pairs (x_2i, x_2i+1) by pos·base^(−2i/d)."""
    d = x.shape[-1]
    th = base ** (-np.arange(0, d, 2) / d)
    a = pos[:, None] * th  # (n, d/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x1 * np.cos(a) - x2 * np.sin(a)
    out[..., 1::2] = x1 * np.sin(a) + x2 * np.cos(a)
    return out


def reference(m: MultiHeadLatentAttention, x, causal):
    P = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    x = x.numpy()
    b, n, _ = x.shape
    h, dh, dr, dv = m.num_heads, m.head_dim, m.rope_dim, m.v_head_dim
    pos = np.arange(n, dtype=np.float64)
    c_q = rms(x @ P["w_dq.weight"].T, P["q_norm.weight"])  # eq. 12
    c_kv = rms(x @ P["w_dkv.weight"].T, P["kv_norm.weight"])  # eq. 9
    k_r = rope(x @ P["w_kr.weight"].T, pos)  # eq. 15, (b, n, d_R)
    out = np.zeros((b, n, h * dv))
    for i in range(h):
        qc = (c_q @ P["w_uq.weight"].T)[..., i * dh : (i + 1) * dh]  # eq. 13
        qr = rope((c_q @ P["w_qr.weight"].T)[..., i * dr : (i + 1) * dr], pos)  # eq. 14
        kc = (c_kv @ P["w_uk.weight"].T)[..., i * dh : (i + 1) * dh]  # eq. 10
        vc = (c_kv @ P["w_uv.weight"].T)[..., i * dv : (i + 1) * dv]  # eq. 11
        q = np.concatenate([qc, qr], -1)
        k = np.concatenate([kc, k_r], -1)  # eqs. 16–17
        e = q @ k.transpose(0, 2, 1) / np.sqrt(dh + dr)
        if causal:
            e = np.where(np.tril(np.ones((n, n), dtype=bool)), e, -np.inf)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        out[..., i * dv : (i + 1) * dv] = a @ vc  # eq. 18
    return out @ P["out_proj.weight"].T  # eq. 19


def build():
    torch.manual_seed(0)
    return MultiHeadLatentAttention(32, 4, kv_latent_dim=16, q_latent_dim=24, head_dim=8, rope_dim=4, v_head_dim=6).double()


@pytest.mark.parametrize("causal", [False, True])
def test_against_numpy(causal):
    m = build()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    y, w = m(x, causal=causal, need_weights=True)
    # RotaryEmbedding computes its angles in float32 (as attnlab does everywhere), hence the tolerance
    np.testing.assert_allclose(y.detach().numpy(), reference(m, x, causal), rtol=1e-6, atol=1e-7)
    fast, _ = m(x, causal=causal)
    torch.testing.assert_close(fast, y)
    assert w.shape == (2, 4, 7, 7)


def test_cached_decoding_equals_recomputation_and_cache_size():
    m = build()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    full, _ = m(x, causal=True)
    cache = LatentCache()
    outs = [m(x[:, :4], causal=True, cache=cache)[0]]  # a prefill chunk, then one token at a time
    outs += [m(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(outs, 1), full)
    assert cache.length == 9 and cache.c_kv.shape == (2, 9, 16) and cache.k_rope.shape == (2, 9, 4)
    assert cache.nbytes() == 2 * 9 * m.cache_bytes_per_token(torch.float64)
    assert m.cache_bytes_per_token(torch.float32) == (16 + 4) * 4


def test_gradients_against_torch_reference():
    torch.manual_seed(3)
    qc, qr = torch.randn(1, 2, 5, 4, dtype=torch.float64, requires_grad=True), torch.randn(1, 2, 5, 2, dtype=torch.float64, requires_grad=True)
    c, kr = torch.randn(1, 5, 6, dtype=torch.float64, requires_grad=True), torch.randn(1, 5, 2, dtype=torch.float64, requires_grad=True)
    wk, wv = torch.randn(8, 6, dtype=torch.float64, requires_grad=True), torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    out, _ = latent_attention(qc, qr, c, kr, wk, wv, num_heads=2, causal=True)
    k = torch.cat([(c @ wk.T).view(1, 5, 2, 4).transpose(1, 2), kr[:, None].expand(1, 2, 5, 2)], -1)
    v = (c @ wv.T).view(1, 5, 2, 3).transpose(1, 2)
    e = torch.cat([qc, qr], -1) @ k.transpose(-1, -2) / 6**0.5
    ref = torch.softmax(e.masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float("-inf")), -1) @ v
    torch.testing.assert_close(out, ref)
    ins = (qc, qr, c, kr, wk, wv)
    g = torch.randn_like(out)
    for a, b in zip(torch.autograd.grad((out * g).sum(), ins), torch.autograd.grad((ref * g).sum(), ins)):
        torch.testing.assert_close(a, b)


def test_contract():
    torch.manual_seed(4)
    wk, wv = (torch.randn(8, 8, dtype=torch.float64).requires_grad_() for _ in range(2))  # W^UK, W^UV: leaves

    def fn(q, k, v, key_mask, need_weights):  # k plays c^KV (latents); the rotary part from q and k
        del v
        mask = None if key_mask is None else key_mask[:, None, None, :]
        heads, w = latent_attention(q.view(q.shape[0], 1, q.shape[1], 8)[..., :6].expand(-1, 2, -1, -1).contiguous()[..., :4],
                                    q.view(q.shape[0], 1, q.shape[1], 8)[..., 6:].expand(-1, 2, -1, -1),
                                    k, k[..., :2], wk, wv, num_heads=2, mask=mask, need_weights=need_weights)
        return heads.transpose(1, 2).flatten(2), w

    contract.masked_keys_never_influence(fn, params=(wk, wv))  # NaN latents never reach W^UK's, W^UV's gradient
    contract.fully_masked_row_is_zero(fn)
    contract.weights_equal_fast(fn)
    m = create("mla", dim=16, num_heads=2, kv_latent_dim=8)
    assert m(torch.randn(1, 0, 16))[0].shape == (1, 0, 16)


def test_float64_gradcheck_of_the_module_with_both_latents():
    """Finite differences against autograd through norms, RoPE and the latents (the rotary part used
    to round float64 inputs to float32, which broke this check)."""
    torch.manual_seed(6)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4, q_latent_dim=6, head_dim=4, rope_dim=2).double()
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t, causal=True)[0], (x,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("q_latent_dim", [None, 24])
def test_causal_nan_token_reaches_no_earlier_row_or_input_gradient(q_latent_dim):
    """A NaN token j under ``causal``: rows i < j equal the float64 NumPy reference on the clean
    input; the input gradient of a loss over rows i < j is finite and equals the clean run's
    (the RMSNorm of the latents used to return 0 · NaN = NaN at token j in its backward)."""
    torch.manual_seed(7)
    m = MultiHeadLatentAttention(32, 4, kv_latent_dim=16, q_latent_dim=q_latent_dim, head_dim=8, rope_dim=4).double()
    j, x0 = 3, torch.randn(2, 6, 32, dtype=torch.float64)
    if q_latent_dim is not None:
        ref = reference(m, x0, True)[:, :j]
    rows = (torch.arange(6) < j).view(6, 1)
    grads = []
    for poison in (False, True):
        x = x0.clone()
        if poison:
            x[:, j] = float("nan")
        x.requires_grad_()
        y, _ = m(x, causal=True)
        if q_latent_dim is not None:
            np.testing.assert_allclose(y[:, :j].detach().numpy(), ref, rtol=1e-9, atol=1e-10)
        if poison:
            assert torch.isnan(y[:, j:]).all()
        grads.append(torch.autograd.grad(torch.where(rows, y, 0.0).sum(), x)[0])
    assert torch.isfinite(grads[1]).all()
    torch.testing.assert_close(grads[1], grads[0], atol=1e-12, rtol=0)
