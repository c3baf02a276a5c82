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


# MultiHeadLatentAttention and LatentCache: defaults, argument messages, padding masks, dropout and the
# cache's bookkeeping, against a float64 NumPy reference written from DeepSeek-V2 §2.1 (eqs. 9–19).
def reference_with_weights(m, x, *, causal=False, key_ok=None, base=10000.0, q_latent=True, queries_too=True):
    """x (b, n, dim) float64 → y (b, n, dim), weights (b, h, n, n); key_ok (b, n) bool (False = padding).

    ``queries_too``: padded tokens are no queries either (zero input, zero output); else only keys are hidden."""
    P = {k: v.detach().double().numpy() for k, v in m.state_dict().items()}
    x = x.detach().numpy()
    b, n, _ = x.shape
    h, dh, dr, dv = m.num_heads, m.head_dim, m.rope_dim, m.v_head_dim
    if key_ok is not None and queries_too:
        x = np.where(key_ok[..., None], x, 0.0)
    pos = np.arange(n, dtype=np.float64)
    c_q = rms(x @ P["w_dq.weight"].T, P["q_norm.weight"]) if q_latent else x  # eq. 12 (or x itself)
    c_kv = rms(x @ P["w_dkv.weight"].T, P["kv_norm.weight"])  # eq. 9
    k_r = rope(x @ P["w_kr.weight"].T, pos, base)  # eq. 15
    out = np.zeros((b, n, h * dv))
    weights = np.zeros((b, h, n, n))
    ok = np.ones((b, n, n), dtype=bool)
    if causal:
        ok &= np.tril(np.ones((n, n), dtype=bool))
    if key_ok is not None:
        ok &= key_ok[:, None, :]
    for i in range(h):
        qc = (c_q @ P["w_uq.weight"].T)[..., i * dh : (i + 1) * dh]
        qr = rope((c_q @ P["w_qr.weight"].T)[..., i * dr : (i + 1) * dr], pos, base)
        kc = (c_kv @ P["w_uk.weight"].T)[..., i * dh : (i + 1) * dh]
        vc = (c_kv @ P["w_uv.weight"].T)[..., i * dv : (i + 1) * dv]
        e = np.concatenate([qc, qr], -1) @ np.concatenate([kc, k_r], -1).transpose(0, 2, 1) / np.sqrt(dh + dr)
        e = np.where(ok, e, -np.inf)
        a = np.exp(e - e.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        weights[:, i] = a
        out[..., i * dv : (i + 1) * dv] = a @ vc
    y = out @ P["out_proj.weight"].T
    if key_ok is not None and queries_too:  # padded queries: zero output and weights
        y = np.where(key_ok[..., None], y, 0.0)
        weights = np.where(key_ok[:, None, :, None], weights, 0.0)
    return y, weights


def x_of(b, n, dim, seed=0):
    return torch.randn(b, n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_defaults_follow_the_documented_rules_and_match_the_reference_without_a_query_latent():
    torch.manual_seed(0)
    m = MultiHeadLatentAttention(16, 2, kv_latent_dim=6).double()
    assert (m.head_dim, m.rope_dim, m.v_head_dim) == (8, 4, 8)  # d_h = dim / h, d_R = d_h / 2, d_v = d_h
    assert m.q_latent_dim is None and m.w_dq is None and m.q_norm is None
    assert m.attn_drop == 0.0 and m.rotary.base == 10000.0
    assert m.kv_norm.eps == 1e-6
    assert m.w_uq.weight.shape == (16, 16) and m.w_qr.weight.shape == (8, 16)  # act on x itself: d_c' = dim
    x = x_of(2, 5, 16)
    y, w = m(x, need_weights=True)  # a fresh module is in training mode: attn_drop=0 keeps it exact
    ref_y, ref_w = reference_with_weights(m, x, q_latent=False)
    np.testing.assert_allclose(y.detach().numpy(), ref_y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)


def test_explicit_sizes_rope_base_and_the_query_latent():
    torch.manual_seed(1)
    m = MultiHeadLatentAttention(12, 3, kv_latent_dim=5, q_latent_dim=7, head_dim=2, rope_dim=6, v_head_dim=3,
                                 rope_base=100.0).double()
    assert (m.head_dim, m.rope_dim, m.v_head_dim, m.q_latent_dim) == (2, 6, 3, 7)
    assert m.q_norm.eps == 1e-6 and m.rotary.base == 100.0
    assert m.w_dq.weight.shape == (7, 12) and m.w_uq.weight.shape == (6, 7) and m.w_qr.weight.shape == (18, 7)
    assert m.w_dkv.weight.shape == (5, 12) and m.w_kr.weight.shape == (6, 12)
    assert m.w_uk.weight.shape == (6, 5) and m.w_uv.weight.shape == (9, 5) and m.out_proj.weight.shape == (12, 9)
    for name in ("w_dq", "w_uq", "w_qr", "w_dkv", "w_kr", "w_uk", "w_uv", "out_proj"):
        assert getattr(m, name).bias is None, name
    x = x_of(1, 6, 12, seed=1)
    y, _ = m(x, causal=True)
    np.testing.assert_allclose(y.detach().numpy(), reference_with_weights(m, x, causal=True, base=100.0)[0], rtol=1e-6, atol=1e-7)


def test_default_rope_dim_is_at_least_two():
    assert MultiHeadLatentAttention(6, 2, kv_latent_dim=2).rope_dim == 2  # d_h = 3 → max(2, 1)
    assert MultiHeadLatentAttention(4, 4, kv_latent_dim=2).rope_dim == 2  # d_h = 1 → max(2, 0)
    assert MultiHeadLatentAttention(16, 2, kv_latent_dim=2).rope_dim == 4  # d_h = 8 → 4
    assert MultiHeadLatentAttention(16, 2, kv_latent_dim=2, head_dim=12).rope_dim == 6  # from head_dim, not dim / h


def test_smallest_valid_sizes_build():
    m = MultiHeadLatentAttention(1, 1, kv_latent_dim=1)
    assert (m.head_dim, m.rope_dim) == (1, 2)
    assert m(torch.randn(1, 2, 1))[0].shape == (1, 2, 1)


@pytest.mark.parametrize("args,kw,message", [
    ((0, 2), {"kv_latent_dim": 4}, "dim must be an integer >= 1; got 0"),
    ((8, 0), {"kv_latent_dim": 4}, "num_heads must be an integer >= 1; got 0"),
    ((8, 2), {"kv_latent_dim": 0}, "kv_latent_dim must be an integer >= 1; got 0"),
    ((2, 4), {"kv_latent_dim": 4}, "head_dim must be >= 1 and rope_dim even and >= 2; got head_dim=0, rope_dim=2"),
    ((8, 2), {"kv_latent_dim": 4, "rope_dim": 3}, "rope_dim must be an even integer >= 2; got 3"),
    ((8, 2), {"kv_latent_dim": 4, "rope_dim": 0}, "rope_dim must be an even integer >= 2; got 0"),
    ((20, 2), {"kv_latent_dim": 4}, "head_dim must be >= 1 and rope_dim even and >= 2; got head_dim=10, rope_dim=5"),
])
def test_argument_messages(args, kw, message):
    with pytest.raises(ValueError) as e:
        MultiHeadLatentAttention(*args, **kw)
    assert str(e.value) == message


@pytest.mark.parametrize("shape", [(2, 8), (1, 3, 7), (1, 3, 8, 1)])
def test_input_shape_message(shape):
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4)
    with pytest.raises(ValueError) as e:
        m(torch.randn(*shape))
    assert str(e.value) == f"x must be (b, n, dim) with dim=8; got shape {shape}"


@pytest.mark.parametrize("q_latent_dim", [None, 5])
@pytest.mark.parametrize("four_d", [False, True])
def test_padding_mask_zeroes_padded_tokens_and_hides_them_as_keys(q_latent_dim, four_d):
    torch.manual_seed(2)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4, q_latent_dim=q_latent_dim).double().eval()
    ok = np.array([[True, True, True, False, False], [True, False, True, True, True]])
    x = x_of(2, 5, 8, seed=2)
    x[0, 3] = float("nan")  # whatever sits in padding never reaches anything
    mask = torch.from_numpy(ok)
    y, w = m(x, mask=mask[:, None, None, :] if four_d else mask, need_weights=True)
    ref_y, ref_w = reference_with_weights(m, x, key_ok=ok, q_latent=q_latent_dim is not None)
    np.testing.assert_allclose(y.detach().numpy(), ref_y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)
    assert torch.all(y[0, 3:] == 0) and torch.all(y[1, 1] == 0)


def test_a_float_bias_mask_is_added_not_taken_as_padding():
    torch.manual_seed(3)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4).double().eval()
    x = x_of(1, 4, 8, seed=3)
    bias = torch.tensor([[0.0, float("-inf"), 0.0, 0.0]], dtype=torch.float64)  # (b, k) float: key 1 hidden
    y, w = m(x, mask=bias, need_weights=True)
    assert torch.all(w[..., 1] == 0) and y[0, 1].abs().sum() > 0  # query 1 still answers
    keep = np.array([[True, False, True, True]])
    ref_w = reference_with_weights(m, x, q_latent=False)[1]
    ref_w = np.where(keep[:, None, None, :], ref_w, 0.0)
    ref_w /= ref_w.sum(-1, keepdims=True)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)


def test_cached_decoding_of_two_tokens_at_a_time_stays_causal():
    torch.manual_seed(4)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4, q_latent_dim=6).double().eval()
    x = x_of(1, 6, 8, seed=4)
    ref = reference_with_weights(m, x, causal=True)[0]
    cache = LatentCache()
    outs = [m(x[:, t : t + 2], causal=True, cache=cache)[0] for t in (0, 2, 4)]
    np.testing.assert_allclose(torch.cat(outs, 1).detach().numpy(), ref, rtol=1e-6, atol=1e-7)
    one = LatentCache()
    step = [m(x[:, t : t + 1], causal=True, cache=one)[0] for t in range(6)]
    np.testing.assert_allclose(torch.cat(step, 1).detach().numpy(), ref, rtol=1e-6, atol=1e-7)


def test_with_a_cache_the_padding_mask_hides_keys_only():
    """With a cache the (b, k) mask counts cached keys and hides them; the new tokens are all queries
    (their outputs are computed, not zeroed), as the docstring says."""
    torch.manual_seed(8)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4).double().eval()
    x = x_of(1, 4, 8, seed=8)
    ok = np.array([[True, True, False, True]])
    y, w = m(x, mask=torch.from_numpy(ok), cache=LatentCache(), need_weights=True)
    ref_y, ref_w = reference_with_weights(m, x, key_ok=ok, q_latent=False, queries_too=False)
    np.testing.assert_allclose(y.detach().numpy(), ref_y, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)
    assert y[0, 2].abs().sum() > 0


def test_cache_with_a_padding_mask_over_every_cached_key():
    torch.manual_seed(5)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4).double().eval()
    x = x_of(1, 3, 8, seed=5)
    cache = LatentCache()
    m(x[:, :2], cache=cache)
    y, w = m(x[:, 2:], mask=torch.tensor([[True, False, True]]), cache=cache, need_weights=True)
    assert w.shape == (1, 2, 1, 3) and torch.all(w[..., 1] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2, 1, dtype=torch.float64))


def test_dropout_acts_only_in_training():
    torch.manual_seed(6)
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4, attn_drop=0.5).double()
    assert m.attn_drop == 0.5
    x = x_of(2, 6, 8, seed=6)
    m.train()
    drawn = torch.stack([m(x)[0] for _ in range(300)])
    m.eval()
    clean = m(x)[0]
    assert (drawn - clean).abs().amax(dim=(1, 2, 3)).min() > 1e-3  # every draw drops something …
    torch.testing.assert_close(drawn.mean(0), clean, atol=0.1, rtol=0)  # … and keeps the mean (1 / (1 − p))
    m.eval()
    y, w = m(x, need_weights=True)
    ref_y, ref_w = reference_with_weights(m, x, q_latent=False)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)  # … none in eval
    np.testing.assert_allclose(y.detach().numpy(), ref_y, rtol=1e-6, atol=1e-7)


def test_need_weights_false_returns_none():
    m = MultiHeadLatentAttention(8, 2, kv_latent_dim=4)
    assert m(torch.randn(1, 3, 8))[1] is None


def test_cache_bytes_per_token_and_extra_repr():
    m = MultiHeadLatentAttention(16, 2, kv_latent_dim=6, q_latent_dim=5, head_dim=4, rope_dim=2)
    assert m.cache_bytes_per_token() == (6 + 2) * 4  # float32 by default
    assert m.cache_bytes_per_token(torch.float16) == (6 + 2) * 2
    assert repr(m).startswith("MultiHeadLatentAttention(\n  dim=16, num_heads=2, kv_latent_dim=6, q_latent_dim=5, head_dim=4, rope_dim=2\n")
    assert m.extra_repr() == "dim=16, num_heads=2, kv_latent_dim=6, q_latent_dim=5, head_dim=4, rope_dim=2"
    assert isinstance(create("mla", dim=8, num_heads=2, kv_latent_dim=4), MultiHeadLatentAttention)


def test_latent_cache_bookkeeping():
    cache = LatentCache()
    assert cache.c_kv is None and cache.k_rope is None and cache.length == 0 and cache.nbytes() == 0
    assert repr(cache) == "LatentCache(length=0)"
    a, ra = torch.randn(2, 3, 4), torch.randn(2, 3, 2)
    c, r = cache.update(a, ra)
    assert c is a and r is ra and cache.length == 3
    b, rb = torch.randn(2, 1, 4, dtype=torch.float64), torch.randn(2, 1, 2, dtype=torch.float64)
    c, r = cache.update(b.float(), rb.float())
    torch.testing.assert_close(c, torch.cat([a, b.float()], 1))
    torch.testing.assert_close(r, torch.cat([ra, rb.float()], 1))
    assert cache.length == 4 and repr(cache) == "LatentCache(length=4)"
    assert cache.nbytes() == 2 * 4 * (4 + 2) * 4
    cache.k_rope = None  # the sum skips an absent tensor
    assert cache.nbytes() == 2 * 4 * 4 * 4
    cache.reset()
    assert cache.c_kv is None and cache.k_rope is None and cache.length == 0


@pytest.mark.parametrize("shape", [(3, 1, 4), (2, 1, 5)])
def test_latent_cache_refuses_latents_of_another_batch_or_width(shape):
    cache = LatentCache()
    cache.update(torch.randn(2, 3, 4), torch.randn(2, 3, 2))
    with pytest.raises(ValueError) as e:
        cache.update(torch.randn(*shape), torch.randn(shape[0], 1, 2))
    assert str(e.value) == f"new latents {shape} do not fit the cached (2, 3, 4); call reset()"
    assert cache.length == 3
    cache.update(torch.randn(2, 2, 4), torch.randn(2, 2, 2))  # same b and d_c, another n: fine
    assert cache.length == 5


def test_a_one_wide_model_stays_causal():
    """The single-query shortcut looks at the number of queries, not at the width: dim = 1, n = 3, causal."""
    torch.manual_seed(9)
    m = MultiHeadLatentAttention(1, 1, kv_latent_dim=2).double()
    x = x_of(1, 3, 1, seed=9)
    y, w = m(x, causal=True, need_weights=True)
    ref_y, ref_w = reference_with_weights(m, x, causal=True, q_latent=False)
    np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(y.detach().numpy(), ref_y, rtol=1e-6, atol=1e-7)
    assert w[0, 0, 0, 1] == 0
