"""Encoder and decoder layers against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
with copied weights (pre- and post-norm, padding and causal masks), and the small Transformer."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attnlab
from attnlab.models.transformer import Transformer, TransformerConfig, attention_maps
from attnlab.nn import KVCache, TransformerDecoderLayer, TransformerEncoderLayer
from attnlab.nn.convert import from_torch

pytestmark = pytest.mark.usefixtures("one_thread")


def _copy_layer(ours: nn.Module, theirs: nn.Module, attn_names: tuple[str, ...]) -> None:
    """Copy PyTorch's layer into ours: same submodule names, attention through from_torch."""
    for name in attn_names:
        setattr(ours, name, from_torch(getattr(theirs, name)))
    sd = {k: v for k, v in theirs.state_dict().items() if k.split(".")[0] not in attn_names}
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    assert not unexpected
    assert all(k.split(".")[0] in attn_names for k in missing)


def _randomise(module: nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(16, 4, dim_feedforward=24, dropout=0.0, activation=activation,
                                        batch_first=True, norm_first=norm_first).eval()
    _randomise(theirs)
    ours = TransformerEncoderLayer(16, 4, ffn_dim=24, dropout=0.0, activation=activation, norm_first=norm_first).eval()
    _copy_layer(ours, theirs, ("self_attn",))
    x = torch.randn(2, 6, 16)
    pad = attnlab.masks.padding([6, 4])
    ref = theirs(x, src_key_padding_mask=~pad)
    out = ours(x, mask=pad)
    torch.testing.assert_close(out[0], ref[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1, :4], ref[1, :4], atol=1e-5, rtol=0)  # torch's fast path may zero padded rows
    causal_ref = theirs(x, src_mask=nn.Transformer.generate_square_subsequent_mask(6), is_causal=True)
    torch.testing.assert_close(ours(x, causal=True), causal_ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(16, 4, dim_feedforward=24, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    _randomise(theirs)
    ours = TransformerDecoderLayer(16, 4, ffn_dim=24, dropout=0.0, norm_first=norm_first).eval()
    _copy_layer(ours, theirs, ("self_attn", "multihead_attn"))
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    src_pad = attnlab.masks.padding([7, 3])
    ref = theirs(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True,
                 memory_key_padding_mask=~src_pad)
    out = ours(x, memory, memory_mask=src_pad, causal=True)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_decoder_layer_memory_dim_and_bad_activation():
    layer = TransformerDecoderLayer(16, 4, memory_dim=10, dropout=0.0)
    assert layer(torch.randn(1, 3, 16), torch.randn(1, 5, 10)).shape == (1, 3, 16)
    with pytest.raises(ValueError, match="activation"):
        TransformerEncoderLayer(16, 4, activation="tanh")


def test_transformer_learns_to_reverse_a_sequence():
    """A quick version of the translation experiment: reverse 4 symbols (src → tgt)."""
    torch.manual_seed(0)
    bos, eos = 6, 7
    model = Transformer(TransformerConfig(src_vocab=6, tgt_vocab=8, dim=32, num_heads=2, num_encoder_layers=1,
                                          num_decoder_layers=1, ffn_dim=32, dropout=0.0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def data(n):
        src = torch.randint(0, 6, (n, 4))
        tgt = torch.cat([torch.full((n, 1), bos), src.flip(1), torch.full((n, 1), eos)], 1)
        return src, tgt

    for _ in range(300):
        src, tgt = data(32)
        logits = model(src, tgt[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    src, tgt = data(50)
    pred = model.greedy(src, bos=bos, eos=eos, max_len=5)
    acc = (pred[:, 1:5] == tgt[:, 1:5]).float().mean().item()
    assert acc > 0.9, f"token accuracy {acc:.2f} after 300 steps"


def test_transformer_attention_maps():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab=9, tgt_vocab=9, dim=16, num_heads=2, num_encoder_layers=2,
                                          num_decoder_layers=3, dropout=0.0))
    src, tgt = torch.randint(0, 9, (1, 6)), torch.randint(0, 9, (1, 4))
    src_mask = torch.tensor([[True] * 5 + [False]])
    maps = attention_maps(model, src, tgt, src_mask=src_mask)
    assert maps["encoder"].shape == (2, 2, 6, 6)
    assert maps["decoder"].shape == (3, 2, 4, 4) and torch.all(maps["decoder"].triu(1) == 0)
    assert maps["cross"].shape == (3, 2, 4, 6) and torch.all(maps["cross"][..., 5] == 0)  # padding gets nothing
    # the first cross-attention map is the decoder layer's own weights
    memory = model.encode(src, src_mask)
    layer = model.decoder[0]
    x = model.pos(model.tgt_emb(tgt) * 16**0.5)
    x = x + layer.self_attn(layer.norm1(x), causal=True)[0]
    _, w = layer.multihead_attn(layer.norm2(x), memory, mask=src_mask, need_weights=True)
    torch.testing.assert_close(maps["cross"][0], w[0], atol=1e-6, rtol=0)


# Encoder and decoder layers against a float64 NumPy reference written here from Vaswani et al. 2017
# §3.1 (post-norm) and Xiong et al. 2020 (pre-norm): every option passed on (grouped-query heads, no
# biases, GELU, a LayerNorm epsilon, memory_dim, rope/ALiBi flags, dropout), the decoder's default causal
# self-attention, its cross-attention weights, and cached step-by-step decoding (self-attention cache and
# the memory's projected keys) in both norm orders; the defaults and the activation refusal.
ERF = np.vectorize(math.erf)


def a(t):
    return None if t is None else t.detach().double().numpy()


def mha_np(m, xq, xk, allow=None, causal=False, zero_padded_queries=None):
    """Vaswani et al. §3.2.2 with grouped heads; allow (b, k) padding; queries at the end of the keys."""
    p = {k: a(v) for k, v in m.projection_weights().items()}

    def lin(x, w, b):
        return x @ w.T + (0 if b is None else b)

    q, k, v = lin(xq, p["w_q"], p["b_q"]), lin(xk, p["w_k"], p["b_k"]), lin(xk, p["w_v"], p["b_v"])
    b, nq, _ = q.shape
    nk = k.shape[1]
    h, h_kv, d = m.num_heads, m.num_kv_heads, m.head_dim
    out = np.zeros((b, nq, h * d))
    weights = np.zeros((b, h, nq, nk))
    for bi in range(b):
        for hi in range(h):
            g = hi // (h // h_kv)
            e = q[bi, :, hi * d:(hi + 1) * d] @ k[bi, :, g * d:(g + 1) * d].T / math.sqrt(d)
            ok = np.ones((nq, nk), dtype=bool)
            if allow is not None:
                ok &= allow[bi][None, :]
            if causal:
                ok &= np.arange(nk)[None, :] <= (np.arange(nq) + nk - nq)[:, None]
            for i in range(nq):
                if ok[i].any():
                    w = np.where(ok[i], np.exp(e[i] - e[i][ok[i]].max()), 0.0)
                    w /= w.sum()
                    weights[bi, hi, i] = w
                    out[bi, i, hi * d:(hi + 1) * d] = w @ v[bi, :, g * d:(g + 1) * d]
    y = lin(out, a(m.out_proj.weight), a(m.out_proj.bias))
    if zero_padded_queries is not None:
        y[~zero_padded_queries] = 0.0
        weights.transpose(0, 2, 1, 3)[~zero_padded_queries] = 0.0
    return y, weights


def ln_np(x, norm):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + norm.eps) * a(norm.weight) + a(norm.bias)


def ffn_np(x, layer):
    h = x @ a(layer.linear1.weight).T + (0 if layer.linear1.bias is None else a(layer.linear1.bias))
    h = np.maximum(h, 0) if layer.activation_name == "relu" else 0.5 * h * (1 + ERF(h / math.sqrt(2)))
    return h @ a(layer.linear2.weight).T + (0 if layer.linear2.bias is None else a(layer.linear2.bias))


def encoder_np(layer, x, pad=None, causal=False):
    def sa(y):
        return mha_np(layer.self_attn, y, y, allow=pad, causal=causal, zero_padded_queries=pad)[0]

    if layer.norm_first:
        x = x + sa(ln_np(x, layer.norm1))
        return x + ffn_np(ln_np(x, layer.norm2), layer)
    x = ln_np(x + sa(x), layer.norm1)
    return ln_np(x + ffn_np(x, layer), layer.norm2)


def decoder_np(layer, x, mem, mem_pad=None, causal=True, pad=None):
    def sa(y):
        return mha_np(layer.self_attn, y, y, allow=pad, causal=causal, zero_padded_queries=pad)[0]

    def ca(y):
        return mha_np(layer.multihead_attn, y, mem, allow=mem_pad)

    if layer.norm_first:
        x = x + sa(ln_np(x, layer.norm1))
        c, w = ca(ln_np(x, layer.norm2))
        x = x + c
        return x + ffn_np(ln_np(x, layer.norm3), layer), w
    x = ln_np(x + sa(x), layer.norm1)
    c, w = ca(x)
    x = ln_np(x + c, layer.norm2)
    return ln_np(x + ffn_np(x, layer), layer.norm3), w


def randomised(layer):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(0, 0.4)
    return layer.double().eval()


def close(got, want, atol=1e-9):
    np.testing.assert_allclose(a(got), want, atol=atol, rtol=0)


# ---- defaults and refusals --------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [TransformerEncoderLayer, TransformerDecoderLayer])
def test_defaults(cls):
    layer = cls(8, 2)
    assert layer.linear1.in_features == 8 and layer.linear1.out_features == 32 and layer.linear2.out_features == 8
    assert layer.linear1.bias is not None and layer.linear2.bias is not None
    assert layer.activation is F.relu and layer.activation_name == "relu" and layer.norm_first is False
    norms = [layer.norm1, layer.norm2] + ([layer.norm3] if cls is TransformerDecoderLayer else [])
    assert all(n.eps == 1e-5 and n.normalized_shape == (8,) for n in norms)
    drops = [layer.dropout, layer.dropout1, layer.dropout2] + ([layer.dropout3] if cls is TransformerDecoderLayer else [])
    assert all(d.p == 0.1 for d in drops)
    attns = [layer.self_attn] + ([layer.multihead_attn] if cls is TransformerDecoderLayer else [])
    for m in attns:
        assert (m.dim, m.num_heads, m.num_kv_heads) == (8, 2, 2) and m.attn_drop == 0.1
        assert m.in_proj_bias is not None and m.out_proj.bias is not None and m.rotary is None and m.alibi is None
    assert cls(8, 2, activation="gelu").activation is F.gelu


def test_options_reach_the_attention_modules():
    enc = TransformerEncoderLayer(8, 4, ffn_dim=6, dropout=0.25, num_kv_heads=2, bias=False, rope=True,
                                  layer_norm_eps=0.5, norm_first=True)
    sa = enc.self_attn
    assert sa.num_kv_heads == 2 and sa.in_proj_bias is None and sa.out_proj.bias is None and sa.attn_drop == 0.25
    assert sa.rotary is not None and sa.alibi is None and enc.linear1.bias is None and enc.linear2.bias is None
    assert enc.linear1.out_features == 6 and enc.norm1.eps == 0.5 and enc.norm2.eps == 0.5 and enc.norm_first
    assert enc.dropout.p == enc.dropout1.p == enc.dropout2.p == 0.25
    assert TransformerEncoderLayer(8, 2, alibi=True).self_attn.alibi is not None
    dec = TransformerDecoderLayer(8, 4, ffn_dim=6, dropout=0.25, num_kv_heads=1, bias=False, rope=True, memory_dim=5,
                                  layer_norm_eps=0.5)
    for m in (dec.self_attn, dec.multihead_attn):
        assert m.num_kv_heads == 1 and m.in_proj_bias is None and m.out_proj.bias is None and m.attn_drop == 0.25
    assert dec.self_attn.rotary is not None and dec.multihead_attn.rotary is None
    assert dec.multihead_attn.kdim == 5 and dec.multihead_attn.vdim == 5 and dec.self_attn.kdim == 8
    assert dec.norm3.eps == 0.5 and dec.dropout3.p == 0.25 and dec.linear1.bias is None


def test_activation_refusal_names_the_choices():
    for cls in (TransformerEncoderLayer, TransformerDecoderLayer):
        with pytest.raises(ValueError, match="^" + re.escape("activation must be one of ['gelu', 'relu']; got 'tanh'") + "$"):
            cls(8, 2, activation="tanh")


# ---- values against the reference --------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kw", [{}, {"activation": "gelu", "num_kv_heads": 1, "layer_norm_eps": 0.3},
                                {"bias": False, "ffn_dim": 5}])
def test_encoder_layer_matches_numpy(norm_first, kw):
    layer = randomised(TransformerEncoderLayer(8, 2, dropout=0.0, norm_first=norm_first, **kw))
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])
    close(layer(x), encoder_np(layer, x.numpy()))
    close(layer(x, mask=pad), encoder_np(layer, x.numpy(), pad=pad.numpy()))
    close(layer(x, causal=True), encoder_np(layer, x.numpy(), causal=True))


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("kw", [{}, {"activation": "gelu", "num_kv_heads": 1, "memory_dim": 3, "layer_norm_eps": 0.3},
                                {"bias": False, "ffn_dim": 5}])
def test_decoder_layer_matches_numpy_with_weights(norm_first, kw):
    layer = randomised(TransformerDecoderLayer(8, 2, dropout=0.0, norm_first=norm_first, **kw))
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    mem = torch.randn(2, 6, kw.get("memory_dim", 8), dtype=torch.float64)
    mem_pad = torch.tensor([[True] * 6, [True, True, False, False, False, False]])
    want, want_w = decoder_np(layer, x.numpy(), mem.numpy(), mem_pad.numpy())
    got = layer(x, mem, memory_mask=mem_pad)  # causal by default
    assert isinstance(got, torch.Tensor)
    close(got, want)
    out, w = layer(x, mem, memory_mask=mem_pad, need_weights=True)
    close(out, want)
    close(w, want_w)
    close(layer(x, mem, causal=False), decoder_np(layer, x.numpy(), mem.numpy(), causal=False)[0])
    # the self-attention's (b, t) padding mask is passed on
    pad = torch.tensor([[True] * 4, [True, True, False, True]])
    close(layer(x, mem, mask=pad, memory_mask=mem_pad), decoder_np(layer, x.numpy(), mem.numpy(), mem_pad.numpy(), pad=pad.numpy())[0])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_cached_steps_match_numpy_and_fill_the_memory_cache(norm_first):
    layer = randomised(TransformerDecoderLayer(8, 2, dropout=0.0, norm_first=norm_first, memory_dim=3))
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    mem = torch.randn(1, 5, 3, dtype=torch.float64)
    mem_pad = torch.tensor([[True, True, True, True, False]])
    want, want_w = decoder_np(layer, x.numpy(), mem.numpy(), mem_pad.numpy())
    cache = KVCache(1)
    steps = []
    for t in range(4):
        y, w = layer(x[:, t:t + 1], mem, memory_mask=mem_pad, cache=cache[0], need_weights=True)
        close(w, want_w[:, :, t:t + 1])
        steps.append(y)
        assert cache[0].length == t + 1 and cache[0].memory.keys is not None and cache[0].memory.keys.shape == (1, 2, 5, 4)
    close(torch.cat(steps, 1), want)


def test_dropout_is_active_in_training():
    layer = randomised(TransformerEncoderLayer(8, 2, dropout=0.5)).train()
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    assert np.abs(a(layer(x)) - encoder_np(layer, x.numpy())).max() > 1e-3
    layer.eval()
    close(layer(x), encoder_np(layer, x.numpy()))


# ---- layers against torch.nn ---------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_cached_causal_steps_match_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True,
                                        norm_first=norm_first).eval()
    ours = TransformerEncoderLayer(8, 2, ffn_dim=12, dropout=0.0, norm_first=norm_first).eval()
    ours.self_attn = from_torch(theirs.self_attn)
    missing, unexpected = ours.load_state_dict(
        {k: v for k, v in theirs.state_dict().items() if not k.startswith("self_attn.")}, strict=False)
    assert not unexpected and all(k.startswith("self_attn.") for k in missing)
    x = torch.randn(1, 4, 8)
    want = theirs(x, src_mask=nn.Transformer.generate_square_subsequent_mask(4), is_causal=True)
    cache = KVCache(1)
    steps = [ours(x[:, t:t + 1], causal=True, cache=cache[0]) for t in range(4)]
    assert cache[0].length == 4
    torch.testing.assert_close(torch.cat(steps, 1), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_without_biases_and_with_an_epsilon_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = nn.TransformerDecoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True, bias=False,
                                        layer_norm_eps=0.5, norm_first=norm_first).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = TransformerDecoderLayer(8, 2, ffn_dim=12, dropout=0.0, bias=False, layer_norm_eps=0.5,
                                   norm_first=norm_first).eval()
    ours.self_attn, ours.multihead_attn = from_torch(theirs.self_attn), from_torch(theirs.multihead_attn)
    missing, unexpected = ours.load_state_dict(
        {k: v for k, v in theirs.state_dict().items() if not k.startswith(("self_attn.", "multihead_attn."))},
        strict=False)
    # torch's bias=False drops the LayerNorm biases too; ours keep theirs (zero from construction)
    assert not unexpected
    assert sorted(k for k in missing if not k.startswith(("self_attn.", "multihead_attn."))) == [
        "norm1.bias", "norm2.bias", "norm3.bias"]
    assert all(getattr(ours, f"norm{i}").bias.eq(0).all() for i in (1, 2, 3))
    assert ours.linear1.bias is None and ours.linear2.bias is None
    assert ours.norm1.eps == ours.norm2.eps == ours.norm3.eps == 0.5
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    want = theirs(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(3), tgt_is_causal=True)
    torch.testing.assert_close(ours(x, memory), want, atol=1e-5, rtol=0)
