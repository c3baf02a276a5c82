"""Encoder and decoder layers against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer
with copied weights (pre- and post-norm, padding and causal masks), and the small Transformer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnlab
from attnlab.models.transformer import Transformer, TransformerConfig, attention_maps
from attnlab.nn import TransformerDecoderLayer, TransformerEncoderLayer
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
