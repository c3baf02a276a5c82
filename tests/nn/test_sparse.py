"""Sparse multi-head modules against a hand-written multi-head attention with the dense pattern mask."""

import pytest
import torch

import attnlab
from attnlab import patterns as P
from attnlab.nn import BigBirdAttention, LocalAttention, LongformerAttention, SparseAttention
from attnlab.nn.backends import BlockSparse


def reference(mod, x, pattern, pad=None):
    """Multi-head attention written out: packed in-projection, split heads, dense masked softmax, merge, out_proj.

    Padded tokens (``pad`` False) are not queries: their rows of the output and the weights are zeros.
    """
    b, n, dim = x.shape
    if pad is not None:
        x = x * pad[..., None]
    h, d = mod.num_heads, dim // mod.num_heads
    w_q, w_k, w_v = mod.in_proj_weight.chunk(3, 0)
    bias = mod.in_proj_bias.chunk(3) if mod.in_proj_bias is not None else (None,) * 3
    heads = [torch.nn.functional.linear(x, w, bb).reshape(b, n, h, d).transpose(1, 2) for w, bb in zip((w_q, w_k, w_v), bias)]
    q, k, v = heads
    s = q @ k.transpose(-1, -2) / d**0.5  # (b, h, n, n)
    allow = pattern.materialize(n).expand(b, 1, n, n)
    if pad is not None:
        allow = allow & pad[:, None, None, :]
    s = s.masked_fill(~allow, float("-inf"))
    w = torch.softmax(s, -1).nan_to_num(0.0)  # a row with no key: zero weights
    o = (w @ v).transpose(1, 2).reshape(b, n, dim)
    if pad is None:
        return mod.out_proj(o), w
    return mod.out_proj(o) * pad[..., None], w * pad[:, None, :, None]


CASES = [
    (lambda: LocalAttention(16, 4, window=3, qkv_bias=True, block=8), P.sliding_window(3)),
    (lambda: LocalAttention(16, 2, window=4, causal=True, block=8), P.sliding_window(4, 0)),
    (lambda: SparseAttention(16, 4, pattern=P.strided(5) & P.causal(), block=8), P.strided(5) & P.causal()),
    (lambda: LongformerAttention(16, 4, window=2, global_indices=[0, 9], block=8), P.sliding_window(2) | P.global_tokens([0, 9])),
    (
        lambda: BigBirdAttention(16, 4, window=2, global_indices=[0], random_per_row=1, random_block=8, seed=4, block=8),
        P.sliding_window(2) | P.global_tokens([0]) | P.random_blocks(1, 8, seed=4),
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_module_equals_written_out_multihead(case):
    make, pattern = CASES[case]
    torch.manual_seed(case)
    mod = make().double().eval()
    x = torch.randn(2, 29, 16, dtype=torch.float64, requires_grad=True)
    pad = torch.ones(2, 29, dtype=torch.bool)
    pad[1, 20:] = False
    y, w = mod(x, mask=pad, need_weights=True)
    y_ref, w_ref = reference(mod, x, pattern, pad)
    torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(w, w_ref, atol=1e-10, rtol=0)
    g = torch.randn_like(y)
    gx, gw = torch.autograd.grad(y, (x, mod.in_proj_weight), g)
    gx_ref, gw_ref = torch.autograd.grad(y_ref, (x, mod.in_proj_weight), g)
    torch.testing.assert_close(gx, gx_ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(gw, gw_ref, atol=1e-10, rtol=0)
    # the fast path (no weights) agrees, and (b, 1, 1, n) padding equals (b, n)
    y_fast, none = mod(x, mask=pad[:, None, None, :])
    assert none is None
    torch.testing.assert_close(y_fast, y, atol=0, rtol=0)


def test_registry_builds_each_module():
    assert {"local", "sparse", "longformer", "bigbird"} <= set(attnlab.available())
    x = torch.randn(1, 70, 32)
    for name, kw in [("local", {}), ("sparse", {"pattern": P.causal()}), ("longformer", {}), ("bigbird", {})]:
        y, _ = attnlab.create(name, dim=32, num_heads=4, **kw)(x)
        assert y.shape == x.shape and torch.isfinite(y).all()


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mod = LocalAttention(8, 2, window=2, attn_drop=0.5, block=4)
    x = torch.randn(1, 12, 8)
    mod.eval()
    a, b = mod(x)[0], mod(x)[0]
    assert torch.equal(a, b)
    mod.train()
    assert not torch.allclose(mod(x)[0], a)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: LocalAttention(10, 3), "divisible"),
        (lambda: SparseAttention(8, 2, pattern="window"), "Pattern"),
        (lambda: LocalAttention(8, 2)(torch.randn(1, 5, 8), mask=torch.ones(1, 4, dtype=torch.bool)), "padding mask"),
        (lambda: LocalAttention(8, 2)(torch.randn(1, 5, 6)), "dim=8"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("kw", [{}, {"num_kv_heads": 2}, {"rope": True}])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_pattern_option_equals_dense_masking(kw, causal):
    """MultiHeadAttention(backend=BlockSparse(...)) against the same weights with the pattern as a dense mask."""
    torch.manual_seed(0)
    pattern = P.sliding_window(3) | P.global_tokens([0, 11])
    sparse = attnlab.nn.MultiHeadAttention(16, 4, backend=BlockSparse(pattern, block=8), **kw).double()
    dense = attnlab.nn.MultiHeadAttention(16, 4, **kw).double()
    dense.load_state_dict(sparse.state_dict())
    x = torch.randn(2, 21, 16, dtype=torch.float64, requires_grad=True)
    pad = torch.ones(2, 21, dtype=torch.bool)
    pad[1, 17:] = False
    allow = pattern.materialize(21) & pad[:, None, None, :]  # (b, 1, n, n)
    y, w = sparse(x, mask=pad, causal=causal, need_weights=True)
    y_ref, w_ref = dense(x * pad[..., None], mask=allow, causal=causal, need_weights=True)
    y_ref, w_ref = y_ref * pad[..., None], w_ref * pad[:, None, :, None]  # padded tokens are not queries
    torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(w, w_ref, atol=1e-10, rtol=1e-10)
    g = torch.randn_like(y)
    grads = torch.autograd.grad(y, (x, sparse.in_proj_weight), g)
    grads_ref = torch.autograd.grad(y_ref, (x, dense.in_proj_weight), g)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_sparse_modules_are_multihead_attention():
    mod = LongformerAttention(16, 4, window=2, global_indices=[0], block=8)
    assert isinstance(mod, attnlab.nn.MultiHeadAttention) and mod.backend.pattern is not None
    assert set(mod.state_dict()) == {"in_proj_weight", "out_proj.weight", "out_proj.bias"}  # qkv_bias=False


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: m(torch.randn(1, 9, 8), torch.randn(1, 5, 8)), "self-attention"),
        (lambda m: m(torch.randn(1, 9, 8), cache=attnlab.nn.LayerCache()), "without a cache"),
        (lambda m: m(torch.randn(1, 9, 8), mask=torch.ones(1, 1, 5, 9, dtype=torch.bool)),
         r"broadcastable to \(b, h, n, n\) = \(1, 2, 9, 9\); got shape \(1, 1, 5, 9\)"),
        (lambda m: m(torch.randn(1, 9, 8), mask=torch.ones(1, 9)),
         r"with no mask or a bool one \(True = may attend\).*; got self-attention, a torch.float32 mask of shape \(1, 9\)$"),
    ],
)
def test_multihead_pattern_bad_inputs(call, message):
    m = attnlab.nn.MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(2), block=4))
    with pytest.raises(ValueError, match=message):
        call(m)


def test_multihead_pattern_rejects_alibi_and_non_patterns():
    with pytest.raises(ValueError, match="alibi"):
        attnlab.nn.MultiHeadAttention(8, 2, backend=BlockSparse(P.sliding_window(2)), alibi=True)
    with pytest.raises(ValueError, match="Pattern"):
        attnlab.nn.MultiHeadAttention(8, 2, backend=BlockSparse("window"))


# The sparse modules' defaults: the pairs each one allows (written out by hand from Longformer's window
# and global tokens, the local window, BigBird's blocks), the projections, block and dropout they pass on.
def band(n, before, after):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j >= i - before) & (j <= i + after)


def globals_(n, idx):
    g = torch.zeros(n, dtype=torch.bool)
    g[list(idx)] = True
    return g[:, None] | g[None, :]


N = 150  # more than the default window of 64 on each side


def test_sparse_attention_defaults_and_message():
    m = SparseAttention(16, pattern=P.causal())
    assert m.num_heads == 8 and m.in_proj_bias is None and m.attn_drop == 0.0 and m.backend.block == 64
    assert m.proj_drop.p == 0.0
    m = SparseAttention(16, 2, pattern=P.causal(), qkv_bias=True, attn_drop=0.25, proj_drop=0.5, block=8)
    assert m.num_heads == 2 and m.in_proj_bias is not None and m.attn_drop == 0.25 and m.proj_drop.p == 0.5
    assert m.backend.block == 8
    with pytest.raises(ValueError) as e:
        SparseAttention(16, pattern="causal")
    assert str(e.value) == "pattern must be an attnlab.patterns.Pattern; got str"
    with pytest.raises(ValueError) as e:
        SparseAttention(16, pattern=None)
    assert str(e.value) == "pattern must be an attnlab.patterns.Pattern; got NoneType"


def test_local_window_defaults_to_64_on_each_side():
    m = LocalAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.backend.block == 64
    assert torch.equal(m.backend.pattern.materialize(N), band(N, 64, 64))
    causal = LocalAttention(16, 4, window=3, causal=True)
    assert causal.num_heads == 4
    assert torch.equal(causal.backend.pattern.materialize(20), band(20, 3, 0))
    assert torch.equal(LocalAttention(16, window=3).backend.pattern.materialize(20), band(20, 3, 3))
    kw = LocalAttention(16, 2, window=2, qkv_bias=True, block=4)
    assert kw.in_proj_bias is not None and kw.backend.block == 4


def test_longformer_defaults_window_64_and_token_0_global():
    m = LongformerAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.backend.block == 64
    assert torch.equal(m.backend.pattern.materialize(N), band(N, 64, 64) | globals_(N, [0]))
    m = LongformerAttention(16, 4, window=2, global_indices=(3, 7), block=8)
    assert m.num_heads == 4 and m.backend.block == 8
    assert torch.equal(m.backend.pattern.materialize(20), band(20, 2, 2) | globals_(20, [3, 7]))


def test_bigbird_defaults():
    m = BigBirdAttention(16)
    assert m.num_heads == 8 and m.in_proj_bias is None and m.backend.block == 64
    allowed = m.backend.pattern.materialize(4 * 64)
    random = P.random_blocks(2, 64, 0).materialize(4 * 64)
    assert torch.equal(allowed, band(256, 64, 64) | globals_(256, [0]) | random)
    # two random key blocks of 64 per query block of 64 (of 4): each row allows 128 random keys
    assert torch.equal(random.sum(-1), torch.full((256,), 128))
    m = BigBirdAttention(16, 4, window=1, global_indices=(2,), random_per_row=1, random_block=4, seed=3, block=4)
    assert m.num_heads == 4 and m.backend.block == 4
    assert torch.equal(m.backend.pattern.materialize(16),
                       band(16, 1, 1) | globals_(16, [2]) | P.random_blocks(1, 4, 3).materialize(16))


@pytest.mark.parametrize("make", [
    lambda: LocalAttention(8, 2, window=1, qkv_bias=True, attn_drop=0.5, block=4),
    lambda: LongformerAttention(8, 2, window=1, qkv_bias=True, attn_drop=0.5, block=4),
    lambda: BigBirdAttention(8, 2, window=1, random_block=4, qkv_bias=True, attn_drop=0.5, block=4),
])
def test_keyword_arguments_reach_multihead(make):
    m = make()
    assert m.in_proj_bias is not None and m.attn_drop == 0.5 and m.backend.block == 4


def test_further_keywords_reach_multihead():
    m = SparseAttention(16, 4, pattern=P.causal(), num_kv_heads=2)
    assert m.num_kv_heads == 2 and m.in_proj_weight.shape == ((4 + 2 * 2) * 4, 16)
