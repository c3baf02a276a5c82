"""MultiHeadAttention beyond the paths test_multihead.py takes: every refusal with its exact message, the
defaults, the initialisation, rotary (at its default and a given base, cached step by step) and ALiBi
heads, (b, 1, 1, n) padding masks, PyTorch-style m(x, x, x) calls and mixed key/value calls, the
cross-attention subclass, and context parallelism on a one-process gloo group. The reference is a
float64 NumPy multi-head attention written here from Vaswani et al. 2017 §3.2.2 (grouped heads:
Ainslie et al. 2023), RoPE from Su et al. 2021 and ALiBi from Press et al. 2021."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import Mask
from attnlab import patterns as P
from attnlab.nn import (
    CrossAttention,
    GroupedQueryAttention,
    LayerCache,
    MemoryCache,
    MultiHeadAttention,
)
from attnlab.nn.backends import Backend, BlockSparse, ContextParallel, Dense

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the reference -------------------------------------------------------------------------------

def rope_np(x, pos, base):
    """x (n, d): rotate each pair (x_2i, x_2i+1) by pos · base^(−2i/d)."""
    d = x.shape[-1]
    out = np.empty_like(x)
    for i in range(d // 2):
        a = pos * base ** (-2 * i / d)
        x1, x2 = x[:, 2 * i], x[:, 2 * i + 1]
        out[:, 2 * i] = x1 * np.cos(a) - x2 * np.sin(a)
        out[:, 2 * i + 1] = x1 * np.sin(a) + x2 * np.cos(a)
    return out


def slopes_np(h):
    """Press et al.: 2^(−8/h), 2^(−16/h), … (h a power of two here)."""
    return np.array([2.0 ** (-8 * (i + 1) / h) for i in range(h)])


def mha_np(m, xq, xk=None, xv=None, allow=None, causal=False, rope_base=None, alibi=False, q_offset=0):
    """float64 multi-head attention with m's weights; allow (b, q, k) bool. For causal masks and ALiBi the
    queries sit at the end of the keys; rotary positions count from 0 (+ q_offset) for queries and keys alike."""
    xk = xq if xk is None else xk
    xv = xk if xv is None else xv
    p = {k: (None if v is None else v.detach().double().numpy()) for k, v in m.projection_weights().items()}
    w_o = m.out_proj.weight.detach().double().numpy()
    b_o = np.zeros(w_o.shape[0]) if m.out_proj.bias is None else m.out_proj.bias.detach().double().numpy()

    def lin(x, w, b):
        return x @ w.T + (0 if b is None else b)

    q, k, v = lin(xq, p["w_q"], p["b_q"]), lin(xk, p["w_k"], p["b_k"]), lin(xv, p["w_v"], p["b_v"])
    b, nq, _ = q.shape
    nk = k.shape[1]
    h, h_kv, d = m.num_heads, m.num_kv_heads, m.head_dim
    heads = np.zeros((b, nq, h * d))
    weights = np.zeros((b, h, nq, nk))
    qpos = np.arange(nq) + (nk - nq)
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // h_kv)
            qh, kh, vh = q[bi, :, hi * d:(hi + 1) * d], k[bi, :, g * d:(g + 1) * d], v[bi, :, g * d:(g + 1) * d]
            if rope_base is not None:
                qh, kh = rope_np(qh, np.arange(nq) + q_offset, rope_base), rope_np(kh, np.arange(nk), rope_base)
            e = qh @ kh.T / math.sqrt(d)
            if alibi:
                e = e - slopes_np(h)[hi] * np.abs(qpos[:, None] - np.arange(nk)[None, :])
            ok = np.ones((nq, nk), dtype=bool)
            if allow is not None:
                ok &= allow[bi]
            if causal:
                ok &= np.arange(nk)[None, :] <= qpos[:, None]
            for i in range(nq):
                if not ok[i].any():
                    continue
                a = np.where(ok[i], np.exp(e[i] - e[i][ok[i]].max()), 0.0)
                a /= a.sum()
                weights[bi, hi, i] = a
                heads[bi, i, hi * d:(hi + 1) * d] = a @ vh
    return heads @ w_o.T + b_o, weights


def randomised(m):
    with torch.no_grad():
        for prm in m.parameters():
            prm.normal_(0, 0.5)
    return m.eval()


def close(got, want, atol=1e-10):
    """float64 throughout; rotary angles are computed in float32 (θ buffer), hence atol=1e-5 with rope."""
    np.testing.assert_allclose(got.detach().double().numpy(), want, atol=atol, rtol=0)


# ---- construction ------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    ({"dim": 10, "num_heads": 4}, "dim must be a positive multiple of num_heads (divisible by it); got dim=10, num_heads=4"),
    ({"dim": 0, "num_heads": 4}, "dim must be a positive multiple of num_heads (divisible by it); got dim=0, num_heads=4"),
    ({"dim": 8, "num_heads": 0}, "dim must be a positive multiple of num_heads (divisible by it); got dim=8, num_heads=0"),
    ({"dim": 8, "num_heads": 2, "backend": BlockSparse(P.sliding_window(2)), "alibi": True},
     "pattern= and alibi=True do not combine: the block-sparse kernel adds no bias"),
    ({"dim": 8, "num_heads": 2, "pattern": P.sliding_window(2)},
     "MultiHeadAttention.__init__() got an unexpected keyword argument 'pattern'"),
    ({"dim": 16, "num_heads": 4, "num_kv_heads": 3}, "num_kv_heads must divide num_heads; got num_heads=4, num_kv_heads=3"),
    ({"dim": 16, "num_heads": 4, "num_kv_heads": 0}, "num_kv_heads must divide num_heads; got num_heads=4, num_kv_heads=0"),
    ({"dim": 16, "num_heads": 4, "rope": True, "alibi": True}, "choose one of rope=True and alibi=True"),
    ({"dim": 8, "num_heads": 2, "backend": ContextParallel(), "alibi": True},
     "context_parallel works without ALiBi, and with rope=True only on the contiguous layout "
     "(global positions rank·n/W + i); got alibi=True, rope=False, cp_layout='contiguous'"),
    ({"dim": 8, "num_heads": 2, "backend": ContextParallel(layout="zigzag"), "rope": True},
     "context_parallel works without ALiBi, and with rope=True only on the contiguous layout "
     "(global positions rank·n/W + i); got alibi=False, rope=True, cp_layout='zigzag'"),
])
def test_construction_refusals_say_what_was_given(kwargs, message):
    with pytest.raises((ValueError, TypeError), match="^" + re.escape(message) + "$"):
        MultiHeadAttention(**kwargs)


def test_edge_constructions_that_are_allowed():
    one = MultiHeadAttention(1, 1)
    assert (one.dim, one.num_heads, one.head_dim) == (1, 1, 1)
    mqa = MultiHeadAttention(8, 4, num_kv_heads=1)  # multi-query: one key/value head
    assert mqa.num_kv_heads == 1 and mqa.in_proj_weight.shape == (8 + 2 * 2, 8)
    assert MultiHeadAttention(8, 1).head_dim == 8
    cp = MultiHeadAttention(8, 2, backend=ContextParallel(), rope=True)  # rope on the contiguous layout is fine
    assert cp.backend.group is None and cp.backend.layout == "contiguous"
    zig = MultiHeadAttention(8, 2, backend=ContextParallel(layout="zigzag"))  # zigzag without rope is fine
    assert zig.backend.layout == "zigzag"


def test_defaults():
    m = MultiHeadAttention(8, 2)
    assert isinstance(m.head_dim, int) and m.head_dim == 4
    assert m.kdim == 8 and m.vdim == 8 and m.packed
    assert m.in_proj_weight.shape == (24, 8) and m.in_proj_bias.shape == (24,)
    assert m.q_proj_weight is None and m.k_proj_weight is None and m.v_proj_weight is None
    assert m.out_proj.bias is not None and m.out_proj.weight.shape == (8, 8)
    assert m.attn_drop == 0.0 and m.proj_drop.p == 0.0
    assert m.rotary is None and m.alibi is None and isinstance(m.backend, Dense)
    assert MultiHeadAttention(8, 2, rope=True).rotary.base == 10000.0
    assert MultiHeadAttention(8, 2, rope=True).rotary.head_dim == 4
    assert MultiHeadAttention(8, 2, alibi=True).alibi.num_heads == 2
    sep = MultiHeadAttention(8, 2, kdim=5, num_kv_heads=1)
    assert not sep.packed and sep.kdim == 5 and sep.vdim == 8 and sep.in_proj_weight is None
    assert sep.q_proj_weight.shape == (8, 8) and sep.k_proj_weight.shape == (4, 5) and sep.v_proj_weight.shape == (4, 8)
    assert sep.in_proj_bias.shape == (16,)
    assert not MultiHeadAttention(8, 2, vdim=3).packed
    named = dict(MultiHeadAttention(8, 2, kdim=5).named_parameters())
    assert sorted(named) == ["in_proj_bias", "k_proj_weight", "out_proj.bias", "out_proj.weight", "q_proj_weight", "v_proj_weight"]
    assert "in_proj_weight" in dict(MultiHeadAttention(8, 2).named_parameters())


def test_reset_parameters_is_xavier_uniform_with_zero_biases():
    torch.manual_seed(0)
    for m in (MultiHeadAttention(32, 4), MultiHeadAttention(32, 4, kdim=16, vdim=8)):
        with torch.no_grad():
            for prm in m.parameters():
                prm.fill_(7.0)
        m.reset_parameters()
        for name in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
            w = getattr(m, name)
            if w is None:
                continue
            bound = math.sqrt(6 / (w.shape[0] + w.shape[1]))  # Glorot & Bengio 2010
            assert w.abs().max() <= bound and w.abs().max() > 0.8 * bound, name
        assert torch.all(m.in_proj_bias == 0) and torch.all(m.out_proj.bias == 0)


def test_projection_weights_are_the_packed_rows():
    m = MultiHeadAttention(8, 4, num_kv_heads=2)
    with torch.no_grad():
        m.in_proj_bias.copy_(torch.arange(16.0))
    p = m.projection_weights()
    assert torch.equal(p["w_q"], m.in_proj_weight[:8]) and torch.equal(p["w_k"], m.in_proj_weight[8:12])
    assert torch.equal(p["w_v"], m.in_proj_weight[12:])
    assert p["b_q"].tolist() == list(range(8)) and p["b_k"].tolist() == [8, 9, 10, 11] and p["b_v"].tolist() == [12, 13, 14, 15]
    s = MultiHeadAttention(8, 2, kdim=3, qkv_bias=False)
    p = s.projection_weights()
    assert p["w_q"] is s.q_proj_weight and p["w_k"] is s.k_proj_weight and p["w_v"] is s.v_proj_weight
    assert p["b_q"] is None and p["b_k"] is None and p["b_v"] is None


# ---- forward: refusals ---------------------------------------------------------------------------

def test_forward_refusals_say_what_was_wrong():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"^value given without key: pass key too \(or neither, for self-attention\)$"):
        m(x, value=x)
    with pytest.raises(ValueError, match=r"^query must be \(b, q, dim\) with dim=8; got shape \(1, 1, 3, 8\)$"):
        m(x[None])
    with pytest.raises(ValueError, match=r"^query must be \(b, q, dim\) with dim=8; got shape \(1, 3, 7\)$"):
        m(x[..., :7])
    with pytest.raises(ValueError, match="^" + re.escape(
        "a MemoryCache is for cross-attention over a fixed memory; self-attention takes a LayerCache") + "$"):
        m(x, cache=MemoryCache())
    with pytest.raises(ValueError, match="^" + re.escape(
        "cache is for self-attention (keys that grow by one token a step); cross-attention keys are fixed: "
        "pass key=memory and an attnlab.nn.MemoryCache (or no cache)") + "$"):
        m(x, torch.randn(1, 4, 8), cache=LayerCache())
    with pytest.raises(ValueError, match="mask must be a torch.Tensor; got list"):
        m(x, mask=[[True] * 3])
    sp = MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(1), block=4))
    sparse_takes = ("the backend BlockSparse(sliding_window(1, 1), block=4) takes self-attention m(x) without a cache, "
                    "with no mask or a bool one (True = may attend): an attnlab.Mask without a bias, a (b, n) padding "
                    "mask or a bool mask broadcastable to (b, h, n, n); got ")
    for call, given in ((lambda: sp(x, torch.randn(1, 3, 8)), "cross-attention (key and value given)"),
                        (lambda: sp(x, cache=LayerCache()), "self-attention, a cache"),
                        (lambda: sp(x, mask=torch.zeros(1, 3, 3)), "self-attention, a torch.float32 mask of shape (1, 3, 3)"),
                        (lambda: sp(x, mask=Mask.bias(torch.zeros(3, 3))),
                         "self-attention, the mask Mask(bias((1, 1, 3, 3), torch.float32))")):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == sparse_takes + given
    with pytest.raises(ValueError, match="^CrossAttention needs a context \\(b, k, kdim\\) to attend to$"):
        CrossAttention(8, 2)(x, None)


# ---- forward: values against the reference ---------------------------------------------------------

@pytest.mark.parametrize("base", [None, 500.0])
@pytest.mark.parametrize("h_kv", [2, 1])
def test_rope_heads_match_numpy_whole_and_step_by_step(base, h_kv):
    torch.manual_seed(1)
    kw = {} if base is None else {"rope_base": base}
    m = randomised(MultiHeadAttention(8, 2, num_kv_heads=h_kv, rope=True, **kw).double())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    ref, ref_w = mha_np(m, x.numpy(), causal=True, rope_base=10000.0 if base is None else base)
    out, w = m(x, causal=True, need_weights=True)
    close(out, ref, 1e-5)
    close(w, ref_w, 1e-5)
    cache = LayerCache()
    steps = [m(x[:, :2], causal=True, cache=cache)[0]] + [m(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(2, 5)]
    close(torch.cat(steps, 1), ref, 1e-5)


def test_alibi_heads_match_numpy_with_and_without_causal():
    torch.manual_seed(2)
    m = randomised(MultiHeadAttention(8, 2, alibi=True).double())
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    for causal in (False, True):
        ref, ref_w = mha_np(m, x.numpy(), causal=causal, alibi=True)
        out, w = m(x, causal=causal, need_weights=True)
        close(out, ref)
        close(w, ref_w)
    cache = LayerCache()
    ref, _ = mha_np(m, x.numpy(), causal=True, alibi=True)
    steps = [m(x[:, t:t + 1], causal=True, cache=cache)[0] for t in range(4)]
    close(torch.cat(steps, 1), ref)


@pytest.mark.parametrize("shape", ["2d", "4d"])
def test_bool_padding_mask_marks_padded_queries_in_self_attention(shape):
    torch.manual_seed(3)
    m = randomised(MultiHeadAttention(8, 2).double())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])
    mask = pad if shape == "2d" else pad[:, None, None, :]
    allow = np.broadcast_to(pad.numpy()[:, None, :], (2, 5, 5))
    ref, ref_w = mha_np(m, x.numpy(), allow=allow)
    ref[~pad.numpy()] = 0.0
    ref_w.transpose(0, 2, 1, 3)[~pad.numpy()] = 0.0
    for call in (lambda: m(x, mask=mask, need_weights=True), lambda: m(x, x, x, mask=mask, need_weights=True)):
        out, w = call()
        close(out, ref)
        close(w, ref_w)
    # the same padding as an additive float mask: padded queries are ordinary queries then
    fmask = torch.zeros(2, 1, 1, 5, dtype=torch.float64).masked_fill(~mask.view(2, 1, 1, 5), float("-inf"))
    ref_f, _ = mha_np(m, x.numpy(), allow=allow)
    close(m(x, mask=fmask)[0], ref_f)
    assert m(x, mask=fmask)[0][1, 4].abs().sum() > 0


def test_a_query_row_mask_is_not_a_padding_mask():
    """A (b, 1, q, k) bool mask with q == k is not padding: no query row is zeroed by it."""
    torch.manual_seed(4)
    m = randomised(MultiHeadAttention(8, 2).double())
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    allow = torch.tensor([[[True, False, False], [True, True, False], [False, True, True]]])
    ref, _ = mha_np(m, x.numpy(), allow=allow.numpy())
    close(m(x, mask=allow)[0], ref)
    close(m(x, mask=allow[:, None])[0], ref)


def test_cached_padding_mask_counts_cached_keys_for_the_queries():
    torch.manual_seed(5)
    m = randomised(MultiHeadAttention(8, 2).double())
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    pad = torch.tensor([[True, True, False, True]])
    cache = LayerCache()
    m(x[:, :2], mask=pad[:, :2], causal=True, cache=cache)
    out, _ = m(x[:, 2:], mask=pad, causal=True, cache=cache)
    allow = np.broadcast_to(pad.numpy()[:, None, :], (1, 4, 4))
    ref, _ = mha_np(m, x.numpy(), allow=allow, causal=True)
    close(out[0, 1], ref[0, 3])
    assert torch.all(out[0, 0] == 0)  # the padded query of this chunk (position 2)


def test_mixed_key_value_calls_are_cross_attention():
    torch.manual_seed(6)
    m = randomised(MultiHeadAttention(8, 2).double())
    x, other = torch.randn(1, 3, 8, dtype=torch.float64), torch.randn(1, 3, 8, dtype=torch.float64)
    for k, v in ((x, other), (other, x)):
        ref, _ = mha_np(m, x.numpy(), k.numpy(), v.numpy())
        close(m(x, k, v)[0], ref)
    ref, _ = mha_np(m, x.numpy(), other.numpy())
    close(m(x, other)[0], ref)  # value defaults to key


def test_cross_attention_subclass_passes_every_argument():
    torch.manual_seed(7)
    m = randomised(CrossAttention(8, 2, kdim=3, vdim=5).double())
    q = torch.randn(2, 2, 8, dtype=torch.float64)
    ctx, val = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    pad = torch.tensor([[True, True, True, False], [True, False, False, False]])
    allow = np.broadcast_to(pad.numpy()[:, None, :], (2, 2, 4))
    ref, ref_w = mha_np(m, q.numpy(), ctx.numpy(), val.numpy(), allow=allow, causal=True)
    out, w = m(q, ctx, val, mask=pad[:, None, None, :], causal=True, need_weights=True)  # (b, 1, 1, k): b = q
    close(out, ref)
    close(w, ref_w)
    cache = MemoryCache()
    close(m(q, ctx, val, mask=pad[:, None, None, :], cache=cache)[0], mha_np(m, q.numpy(), ctx.numpy(), val.numpy(), allow=allow)[0])
    assert cache.keys is not None and cache.keys.shape == (2, 2, 4, 4)
    out, w = m(q, ctx, val)  # defaults: not causal, no weights
    close(out, mha_np(m, q.numpy(), ctx.numpy(), val.numpy())[0])
    assert w is None


def test_memory_cache_with_rope_reuses_rotated_keys():
    torch.manual_seed(8)
    m = randomised(MultiHeadAttention(8, 2, rope=True).double())
    q, mem = torch.randn(1, 2, 8, dtype=torch.float64), torch.randn(1, 5, 8, dtype=torch.float64)
    ref, _ = mha_np(m, q.numpy(), mem.numpy(), rope_base=10000.0)
    cache = MemoryCache()
    close(m(q, mem, cache=cache)[0], ref, 1e-5)
    close(m(q, mem, cache=cache)[0], ref, 1e-5)  # from the cache: keys rotated once, not twice


def test_grouped_query_class_and_extra_repr():
    g = GroupedQueryAttention(16, 4, num_kv_heads=2, attn_drop=0.1)
    assert g.num_kv_heads == 2 and g.attn_drop == 0.1
    assert MultiHeadAttention(16, 4).extra_repr() == "dim=16, num_heads=4"
    assert g.extra_repr() == "dim=16, num_heads=4, num_kv_heads=2, attn_drop=0.1"
    assert MultiHeadAttention(16, 4, kdim=6).extra_repr() == "dim=16, num_heads=4, kdim=6, vdim=16"
    assert MultiHeadAttention(16, 4, vdim=6).extra_repr() == "dim=16, num_heads=4, kdim=16, vdim=6"
    pat = P.sliding_window(2)
    assert MultiHeadAttention(16, 4, backend=BlockSparse(pat, block=8)).extra_repr() == (
        f"dim=16, num_heads=4, backend=BlockSparse({pat!r}, block=8)")


def test_output_dropout_in_training_only():
    torch.manual_seed(9)
    m = MultiHeadAttention(8, 2, proj_drop=0.5)
    with torch.no_grad():
        m.out_proj.bias.fill_(1.0)
    x = torch.randn(1, 50, 8)
    out = m(x)[0]
    assert 0.3 < (out == 0).float().mean() < 0.7  # about half dropped, the rest scaled by 2
    m.eval()
    assert not torch.any(m(x)[0] == 0)


def test_attention_dropout_in_training_only():
    torch.manual_seed(10)
    m = randomised(MultiHeadAttention(8, 2, attn_drop=0.5).double())
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    ref, _ = mha_np(m, x.numpy())
    close(m(x)[0], ref)  # eval: no dropout
    m.train()
    assert (m(x)[0] - torch.from_numpy(ref)).abs().max() > 1e-3


def test_single_causal_query_without_cache_sees_every_key():
    """One query at the end of the keys (bottom-right causal) may attend every key."""
    torch.manual_seed(11)
    m = randomised(MultiHeadAttention(8, 2).double())
    q, kv = torch.randn(1, 1, 8, dtype=torch.float64), torch.randn(1, 4, 8, dtype=torch.float64)
    ref, _ = mha_np(m, q.numpy(), kv.numpy())
    close(m(q, kv, causal=True)[0], ref)


# ---- context parallelism on one process ------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, {"rope": True}, {"num_kv_heads": 1, "mode": "ulysses"}])
def test_context_parallel_on_one_process_matches_numpy(one_process_group, kw):
    torch.manual_seed(12)
    mode = kw.pop("mode", "ring")
    m = randomised(MultiHeadAttention(8, 2, backend=ContextParallel(mode=mode), **kw).double())
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])
    allow = np.broadcast_to(pad.numpy()[:, None, :], (2, 5, 5))
    ref, _ = mha_np(m, x.numpy(), allow=allow, causal=True, rope_base=10000.0 if kw.get("rope") else None)
    ref[~pad.numpy()] = 0.0
    out, w = m(x, mask=pad, causal=True)
    assert w is None
    close(out, ref, 1e-5)
    ref_nc, _ = mha_np(m, x.numpy(), rope_base=10000.0 if kw.get("rope") else None)
    close(m(x)[0], ref_nc, 1e-5)


def test_context_parallel_with_a_pattern_on_one_process(one_process_group):
    """A sliding window (|i − j| ≤ 1, written here) with padding, causal and not."""
    torch.manual_seed(15)
    m = randomised(MultiHeadAttention(8, 2, backend=ContextParallel(pattern=P.sliding_window(1))).double())
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pad = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    allow = (np.abs(i - j) <= 1)[None] & pad.numpy()[:, None, :]
    for causal in (False, True):
        ref, _ = mha_np(m, x.numpy(), allow=allow, causal=causal)
        ref[~pad.numpy()] = 0.0
        close(m(x, mask=pad, causal=causal)[0], ref)


def test_context_parallel_refusals(one_process_group):
    m = MultiHeadAttention(8, 2, backend=ContextParallel())
    x = torch.randn(2, 4, 8)
    takes = ("the backend ContextParallel(group=None, mode='ring', layout='contiguous') takes self-attention m(x) of a "
             "sharded sequence, without a cache and without weights (they would be n × n), with no mask, Mask.causal() or "
             "this rank's key padding: Mask.padding(keep), or a (b, n/W) or (b, 1, 1, n/W) bool mask; got ")
    for call, given in ((lambda: m(x, torch.randn(2, 4, 8)), "cross-attention (key and value given)"),
                        (lambda: m(x, cache=LayerCache()), "self-attention, a cache"),
                        (lambda: m(x, need_weights=True), "self-attention, need_weights=True"),
                        (lambda: m(x, mask=torch.zeros(2, 4)), "self-attention, a torch.float32 mask of shape (2, 4)"),
                        (lambda: m(x, mask=torch.ones(2, 4, 4, dtype=torch.bool)),
                         "self-attention, a torch.bool mask of shape (2, 4, 4)"),
                        (lambda: m(x, mask=Mask.causal() & Mask.padding([4, 3])),
                         "self-attention, the mask Mask(causal(align='bottom-right') & padding(lengths=[4, 3]))")):
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value) == takes + given


def test_multi_query_weights_are_per_query_head():
    torch.manual_seed(13)
    m = randomised(MultiHeadAttention(8, 2, num_kv_heads=1).double())
    x = torch.randn(1, 3, 8, dtype=torch.float64)
    ref, ref_w = mha_np(m, x.numpy())
    out, w = m(x, need_weights=True)
    close(out, ref)
    close(w, ref_w)


@pytest.mark.parametrize("float_mask", [False, True])
def test_cross_attention_never_reads_keys_no_query_may_attend(float_mask):
    """NaN in padded memory positions reaches no output and no gradient (W_k and W_v included)."""
    torch.manual_seed(14)
    m = randomised(MultiHeadAttention(8, 2, kdim=3, vdim=5).double())
    q = torch.randn(2, 2, 8, dtype=torch.float64)
    k, v = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, 5, dtype=torch.float64)
    pad = torch.tensor([[True, True, True, False], [True, False, False, False]])
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[~pad], v_nan[~pad] = float("nan"), float("nan")
    mask = pad if not float_mask else torch.zeros(2, 4, dtype=torch.float64).masked_fill(~pad, float("-inf"))
    out, w = m(q, k_nan, v_nan, mask=mask[:, None, None, :], need_weights=True)  # (b, 1, 1, k): b = q
    ref, ref_w = mha_np(m, q.numpy(), k.numpy(), v.numpy(), allow=np.broadcast_to(pad.numpy()[:, None, :], (2, 2, 4)))
    close(out, ref)
    close(w, ref_w)
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters())


@pytest.mark.parametrize("causal", [False, True])
def test_sparse_pattern_module_matches_numpy_with_weights(causal):
    """pattern= (a sliding window |i − j| ≤ 1, written here) with a (b, n) padding mask: outputs and weights."""
    torch.manual_seed(16)
    m = randomised(MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(1), block=4)).double())
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    pad = torch.tensor([[True] * 6, [True, True, True, True, False, False]])
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    allow = (np.abs(i - j) <= 1)[None] & pad.numpy()[:, None, :]
    ref, ref_w = mha_np(m, x.numpy(), allow=allow, causal=causal)
    ref[~pad.numpy()] = 0.0
    ref_w.transpose(0, 2, 1, 3)[~pad.numpy()] = 0.0
    out, w = m(x, mask=pad, causal=causal, need_weights=True)
    close(out, ref)
    close(w, ref_w)
    out2, w2 = m(x, mask=pad[:, None, None, :], causal=causal)
    close(out2, ref)
    assert w2 is None


# MultiHeadAttention's options reaching their kernels. ALiBi on top of a given mask (bool,
# causal) and under autocast; the cross-attention subclass's causal flag; the separate-projection guard of
# ``projection_weights``; the module's ``block`` and ``cp_mode`` reaching their kernels; the causal sparse
# pattern composed once per module. The reference is a float64 NumPy multi-head attention written here from
# Vaswani et al. 2017 §3.2.2 with ALiBi's −m_h·|i − j| (Press et al. 2021), queries at the end of the keys.
def reference(m, xq, xk=None, xv=None, allow=None, causal=False, alibi=False):
    """float64 (out (b, q, dim), weights (b, h, q, k)) with m's weights; allow (b, q, k) bool or None."""
    xk = xq if xk is None else xk
    xv = xk if xv is None else xv
    p = {k: (None if v is None else v.detach().double().numpy()) for k, v in m.projection_weights().items()}
    w_o = m.out_proj.weight.detach().double().numpy()
    b_o = m.out_proj.bias.detach().double().numpy()

    def lin(x, w, b):
        return x @ w.T + (0 if b is None else b)

    q, k, v = lin(xq, p["w_q"], p["b_q"]), lin(xk, p["w_k"], p["b_k"]), lin(xv, p["w_v"], p["b_v"])
    b, nq, nk = q.shape[0], q.shape[1], k.shape[1]
    h, d = m.num_heads, m.head_dim
    slopes = [2.0 ** (-8 * (i + 1) / h) for i in range(h)]  # h a power of two here
    qpos, kpos = np.arange(nq) + (nk - nq), np.arange(nk)
    heads, weights = np.zeros((b, nq, h * d)), np.zeros((b, h, nq, nk))
    for bi in range(b):
        for hi in range(h):
            sl = slice(hi * d, (hi + 1) * d)
            e = q[bi, :, sl] @ k[bi, :, sl].T / math.sqrt(d)
            if alibi:
                e = e - slopes[hi] * np.abs(qpos[:, None] - kpos[None, :])
            ok = np.ones((nq, nk), dtype=bool)
            if allow is not None:
                ok &= allow[bi]
            if causal:
                ok &= kpos[None, :] <= qpos[:, None]
            for i in range(nq):
                if ok[i].any():
                    a = np.where(ok[i], np.exp(e[i] - e[i][ok[i]].max()), 0.0)
                    weights[bi, hi, i] = a / a.sum()
                    heads[bi, i, sl] = weights[bi, hi, i] @ v[bi, :, sl]
    return heads @ w_o.T + b_o, weights




# ---- ALiBi with a mask, and under autocast -------------------------------------------------------------

def test_alibi_bias_is_added_to_a_given_bool_mask():
    """The bias −m_h·|i − j| and the mask both apply: a (b, q, k) mask, and a (b, k) padding mask in cross-attention."""
    torch.manual_seed(40)
    m = randomised(MultiHeadAttention(8, 2, alibi=True).double())
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    allow = torch.tensor([[[True, False, True, True], [False, True, True, False], [True, True, False, True],
                           [True, False, False, True]]]).expand(2, 4, 4).clone()
    allow[1, 0] = torch.tensor([False, False, True, True])
    for causal in (False, True):
        ref, ref_w = reference(m, x.numpy(), allow=allow.numpy(), causal=causal, alibi=True)
        out, w = m(x, mask=allow, causal=causal, need_weights=True)
        close(out, ref)
        close(w, ref_w)
        close(m(x, mask=allow, causal=causal)[0], ref)  # the fused path too
    mem = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[True, True, False, True, True], [False, True, True, True, False]])
    ref, ref_w = reference(m, x.numpy(), mem.numpy(), allow=np.broadcast_to(pad.numpy()[:, None, :], (2, 4, 5)), alibi=True)
    out, w = m(x, mem, mask=pad, need_weights=True)
    close(out, ref)
    close(w, ref_w)


def test_alibi_runs_under_autocast_with_the_bias_in_the_scores_dtype():
    """Under CPU autocast the heads are bfloat16; the ALiBi bias follows them (a float32 bias is refused by
    the core), and the result stays within bfloat16's error of the float64 reference."""
    torch.manual_seed(41)
    m = randomised(MultiHeadAttention(8, 2, alibi=True))
    x = torch.randn(2, 5, 8)
    pad = torch.tensor([[True] * 5, [True, True, True, False, True]])
    allow = np.broadcast_to(pad.numpy()[:, None, :], (2, 5, 5))
    for mask, ok in ((None, None), (pad[:, None, None, :].expand(2, 1, 5, 5), allow)):
        ref, ref_w = reference(m, x.double().numpy(), allow=ok, alibi=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for need in (False, True):
                out, w = m(x, mask=mask, need_weights=need)
                assert out.dtype == torch.bfloat16
                close(out, ref, atol=0.03 * np.abs(ref).max())  # bfloat16: 8 bits; leaving ALiBi out errs by 6 %
                if need:
                    close(w, ref_w, atol=0.025)  # (ALiBi left out: 0.05)


# ---- CrossAttention passes causal -----------------------------------------------------------------------

def test_cross_attention_subclass_passes_causal():
    """Three queries at the end of five keys: query i may attend keys 0 … i + 2 (bottom-right)."""
    torch.manual_seed(42)
    m = randomised(CrossAttention(8, 2, kdim=3, vdim=5).double())
    q = torch.randn(1, 3, 8, dtype=torch.float64)
    ctx, val = torch.randn(1, 5, 3, dtype=torch.float64), torch.randn(1, 5, 5, dtype=torch.float64)
    ref, ref_w = reference(m, q.numpy(), ctx.numpy(), val.numpy(), causal=True)
    assert ref_w[0, :, 0, 3:].max() == 0 and ref_w[0, :, 0, 3].max() == 0
    out, w = m(q, ctx, val, causal=True, need_weights=True)
    close(out, ref)
    close(w, ref_w)
    close(m(q, ctx, val, causal=True)[0], ref)
    ref_full, _ = reference(m, q.numpy(), ctx.numpy(), val.numpy())
    assert np.abs(ref_full - ref).max() > 1e-3  # causal changes these outputs


# ---- projection_weights' guard ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["q_proj_weight", "k_proj_weight", "v_proj_weight"])
def test_projection_weights_refuses_a_separate_weight_set_to_none(name):
    """kdim ≠ dim: three separate weights; with one of them removed by hand there is no W to return."""
    m = MultiHeadAttention(8, 2, kdim=3)
    setattr(m, name, None)
    with pytest.raises(AssertionError):
        m.projection_weights()


# ---- the sparse module's block, its causal pattern ----------------------------------------------------------

def test_backends_refuse_bad_settings_when_they_are_built():
    with pytest.raises(ValueError, match="^" + re.escape("block must be a positive integer; got 0") + "$"):
        BlockSparse(P.sliding_window(1), block=0)
    with pytest.raises(ValueError, match="^" + re.escape("block must be a positive integer; got 2.5") + "$"):
        BlockSparse(P.sliding_window(1), block=2.5)
    with pytest.raises(ValueError, match="^" + re.escape("mode must be one of ['ring', 'ulysses']; got 'tree'") + "$"):
        ContextParallel(mode="tree")
    with pytest.raises(ValueError, match="^" + re.escape(
            "layout must be one of ('contiguous', 'zigzag'); got 'striped'") + "$"):
        ContextParallel(layout="striped")
    with pytest.raises(ValueError, match="^" + re.escape(
            "backend must be an attnlab.nn.backends.Backend (Dense(), BlockSparse(pattern), ContextParallel(group)); "
            "got the abstract Backend()") + "$"):
        MultiHeadAttention(8, 2, backend=Backend())


def test_sparse_module_hands_its_block_to_the_kernel():
    pattern = P.sliding_window(1)
    m = MultiHeadAttention(8, 2, backend=BlockSparse(pattern, block=2)).double()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    out, _ = m(x)
    assert [key[:2] for key in pattern.kernel_plans] == [(6, 2)]  # the kernel planned tiles of 2
    m.backend = BlockSparse(pattern, block=4)
    torch.testing.assert_close(m(x)[0], out)  # the same pairs in tiles of 4
    assert [key[:2] for key in pattern.kernel_plans] == [(6, 2), (6, 4)]


def test_causal_sparse_pattern_is_composed_once_per_module():
    """pattern & causal is built once, by the backend, and reused (the kernel's plans are cached per pattern)."""
    m = MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(1), block=4)).eval()
    x = torch.randn(1, 6, 8)
    m(x, causal=True)
    first = m.backend.causal_pattern
    m(x, causal=True)
    m(x)
    assert m.backend.causal_pattern is first
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    assert torch.equal(first.allows(i, j, 6), ((i - j).abs() <= 1) & (j <= i))



