"""``Transformer``: a small encoder–decoder (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762).

    memory = Encoder(E_src[src] · √d + PE)                  (b, s, dim)
    h      = Decoder(E_tgt[tgt] · √d + PE, memory)          (b, t, dim)   causal self-attn + cross-attn
    logits = h W_outᵀ                                       (b, t, tgt_vocab)

Built from ``attnlab.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``.
``positional`` picks how order enters: ``"sinusoidal"`` (the paper, the default),
``"learned"`` (one (max_len, dim) table shared by source and target) or ``"rope"``
(rotary, in every self-attention; cross-attention has no positions of its own).
Padding masks are (b, s) / (b, t) bool, **True on real
tokens**; the model hands them to its layers as (b, 1, 1, s) / (b, 1, 1, t), which
is never ambiguous (a (b, n) mask is, to a layer, when b = n). ``greedy`` decodes with the decoder's key/value cache. Pre-norm
(``norm_first=True``, the default here: it trains without warm-up) adds a final
LayerNorm to each stack. ``attention_maps`` returns the encoder's, the decoder's
and the cross-attention's weights per layer and head (from a trace).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from .. import masks
from ..mask import Mask
from ..nn.cache import KVCache
from ..nn.layers import TransformerDecoderLayer, TransformerEncoderLayer
from ..nn.positional import POSITIONAL as ALL_POSITIONAL
from ..nn.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..trace import trace

# how order enters: a module added to the embeddings (or None: rotary, inside the attention)
_EMBED = {
    "sinusoidal": lambda c: SinusoidalPositionalEncoding(c.dim),
    "learned": lambda c: LearnedPositionalEmbedding(c.max_len, c.dim),
    "rope": lambda c: None,
}
# the names of nn.positional.POSITIONAL the translator takes (all but ALiBi), in that order
POSITIONAL = tuple(name for name in ALL_POSITIONAL if name in _EMBED)


def _key_mask(mask: torch.Tensor | Mask | None) -> torch.Tensor | Mask | None:
    """A (b, n) bool padding mask → an ``attnlab.Mask``, built once per forward and passed to every layer
    (a float one → (b, 1, 1, n)); a mask value and other shapes pass as given."""
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        return Mask.padding(mask) if mask.dtype == torch.bool else masks.as_key_mask(mask)
    return mask


@dataclass
class TransformerConfig:
    src_vocab: int
    tgt_vocab: int
    dim: int = 128
    num_heads: int = 4
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    ffn_dim: int | None = None  # default 4·dim
    dropout: float = 0.1
    norm_first: bool = True
    num_kv_heads: int | None = None
    positional: str = "sinusoidal"  # one of POSITIONAL
    max_len: int = 512  # the longest source or target ("learned" positions only)

    def __post_init__(self):
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {tuple(POSITIONAL)}; got {self.positional!r}")
        for name in ("src_vocab", "tgt_vocab", "dim", "num_heads", "num_encoder_layers", "num_decoder_layers", "max_len"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.dim % self.num_heads:
            raise ValueError(f"dim must be a multiple of num_heads; got dim={self.dim}, num_heads={self.num_heads}")
        if self.positional in ("sinusoidal", "rope") and (self.dim if self.positional == "sinusoidal" else self.dim // self.num_heads) % 2:
            what = "dim" if self.positional == "sinusoidal" else "the head size dim / num_heads"
            raise ValueError(f"{self.positional} positions need an even {what}; got dim={self.dim}, num_heads={self.num_heads}")
        if self.ffn_dim is not None and self.ffn_dim < 1:
            raise ValueError(f"ffn_dim must be >= 1; got {self.ffn_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")


class Transformer(nn.Module):
    """``forward(src (b, s), tgt (b, t), *, src_mask=None, tgt_mask=None) → logits (b, t, tgt_vocab)``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = config
        self.src_emb = nn.Embedding(c.src_vocab, c.dim)
        self.tgt_emb = nn.Embedding(c.tgt_vocab, c.dim)
        for emb in (self.src_emb, self.tgt_emb):  # N(0, 1/dim): after the ·√dim scale, unit size like the positions
            nn.init.normal_(emb.weight, std=c.dim**-0.5)
        self.pos = _EMBED[c.positional](c)  # None for rope
        self.drop = nn.Dropout(c.dropout)
        kw = dict(ffn_dim=c.ffn_dim, dropout=c.dropout, norm_first=c.norm_first, num_kv_heads=c.num_kv_heads,
                  rope=c.positional == "rope")
        self.encoder = nn.ModuleList(TransformerEncoderLayer(c.dim, c.num_heads, **kw) for _ in range(c.num_encoder_layers))
        self.decoder = nn.ModuleList(TransformerDecoderLayer(c.dim, c.num_heads, **kw) for _ in range(c.num_decoder_layers))
        self.enc_norm = nn.LayerNorm(c.dim) if c.norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(c.dim) if c.norm_first else nn.Identity()
        self.out = nn.Linear(c.dim, c.tgt_vocab)

    def _embed(self, emb: nn.Embedding, ids: torch.Tensor, offset: int = 0) -> torch.Tensor:
        x = emb(ids) * math.sqrt(self.config.dim)  # (b, n, dim)
        return self.drop(x if self.pos is None else self.pos(x, offset))

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | Mask | None = None) -> torch.Tensor:
        """src (b, s) ids, src_mask (b, s) True on real tokens → memory (b, s, dim)."""
        x = self._embed(self.src_emb, src)
        mask = _key_mask(src_mask)
        for layer in self.encoder:
            x = layer(x, mask=mask)
        return self.enc_norm(x)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        src_mask: torch.Tensor | Mask | None = None,
        tgt_mask: torch.Tensor | Mask | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """tgt (b, t) ids → logits (b, t, tgt_vocab); with a cache, tgt holds only the new tokens.

        ``need_weights=True`` also returns the last decoder layer's cross-attention
        weights (b, h, t, s), per head.
        """
        offset = 0 if cache is None else cache.length
        x = self._embed(self.tgt_emb, tgt, offset)
        weights = None
        last = len(self.decoder) - 1
        mask, memory_mask = _key_mask(tgt_mask), _key_mask(src_mask)  # built once, passed to every layer
        for i, layer in enumerate(self.decoder):
            kw = dict(mask=mask, memory_mask=memory_mask, causal=True, cache=None if cache is None else cache[i])
            if need_weights and i == last:
                x, weights = layer(x, memory, need_weights=True, **kw)
            else:
                x = layer(x, memory, **kw)
        logits = self.out(self.dec_norm(x))
        return (logits, weights) if need_weights else logits

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        *,
        src_mask: torch.Tensor | Mask | None = None,
        tgt_mask: torch.Tensor | Mask | None = None,
    ) -> torch.Tensor:
        src_mask = _key_mask(src_mask)  # one mask value for the encoder's and the decoder's layers
        return self.decode(tgt, self.encode(src, src_mask), src_mask=src_mask, tgt_mask=tgt_mask)

    @torch.no_grad()
    def greedy(
        self, src: torch.Tensor, *, bos: int, eos: int, max_len: int = 50, src_mask: torch.Tensor | Mask | None = None
    ) -> torch.Tensor:
        """Greedy decoding with the cache: (b, s) → (b, ≤ max_len + 1) ids starting with ``bos``."""
        src_mask = _key_mask(src_mask)
        memory = self.encode(src, src_mask)
        cache = KVCache(len(self.decoder))
        out = torch.full((src.shape[0], 1), bos, dtype=torch.long, device=src.device)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        nxt = out
        for _ in range(max_len):
            logits = self.decode(nxt, memory, src_mask=src_mask, cache=cache)[:, -1]  # (b, vocab)
            nxt = logits.argmax(-1, keepdim=True).masked_fill(done.unsqueeze(-1), eos)
            out = torch.cat([out, nxt], dim=1)
            done |= nxt.squeeze(-1) == eos
            if bool(done.all()):
                break
        return out

    def config_dict(self) -> dict:
        return asdict(self.config)


@torch.no_grad()
def attention_maps(
    model: Transformer, src: torch.Tensor, tgt: torch.Tensor, *, src_mask: torch.Tensor | Mask | None = None
) -> dict[str, torch.Tensor]:
    """Every layer's and head's weights for one pair (src (1, s), tgt (1, t)), read from a trace.

    Returns ``{"encoder": (L_enc, h, s, s), "decoder": (L_dec, h, t, t), "cross": (L_dec, h, t, s)}``.
    """
    if src.dim() != 2 or tgt.dim() != 2 or src.shape[0] != 1 or tgt.shape[0] != 1:
        raise ValueError(f"attention_maps takes one pair, src (1, s) and tgt (1, t); got {tuple(src.shape)}, {tuple(tgt.shape)}")
    was_training = model.training
    model.eval()
    with trace() as t:
        model(src, tgt, src_mask=src_mask)
    model.train(was_training)
    maps = [s.value[0] for s in t if s.name == "weights"]  # encoder layers, then (self, cross) per decoder layer
    n_enc = len(model.encoder)
    dec = maps[n_enc:]
    return {"encoder": torch.stack(maps[:n_enc]), "decoder": torch.stack(dec[0::2]), "cross": torch.stack(dec[1::2])}


__all__ = ["Transformer", "TransformerConfig", "attention_maps", "POSITIONAL"]
