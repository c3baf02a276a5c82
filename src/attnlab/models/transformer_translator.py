"""``TransformerTranslator``: the small ``Transformer`` behind the translation lab's interface.

Vaswani et al. 2017 (https://arxiv.org/abs/1706.03762), so the Transformer trains,
validates, checkpoints, decodes (greedy and beam) and is evaluated with exactly
the code, data, vocabularies and batches of the RNN models (``attnlab.models.Seq2Seq``):

* ``forward(src, src_mask, tgt_in) -> logits (b, t, V)`` (teacher forcing; the
  decoder's causal mask hides the future, so the target's padding, which comes
  last, never reaches a real position and the loss ignores it);
* ``start(src, src_mask) -> (memory, state)`` encodes once;
* ``step(memory, state, y_prev (b,)) -> (logits (b, V), state, weights (b, s))``
  decodes one token with the key/value cache of every decoder layer.

The cache lives in ``state`` as plain tensors with the batch first (``k.<layer>``,
``v.<layer>``: (b, h_kv, capacity, d_h) buffers, ``length`` (b,)), so
``attnlab.train.decode.beam_search`` reorders it like an RNN state. Decoding
with the cache gives the same tokens as recomputing the prefix (tested).

**The alignment** a step returns is the cross-attention of the *last* decoder
layer, averaged over its heads: one of several possible readings (other layers
and single heads can look elsewhere; ``attnlab.models.transformer.attention_maps``
has them all). It is the analogue of the RNN's α_t, not the same quantity.
"""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from ..mask import Mask
from ..nn.cache import KVCache, LayerCache
from .transformer import Transformer, TransformerConfig

ALIGNMENT = "cross-attention of the last decoder layer, averaged over heads"


class TransformerTranslator(nn.Module):
    """``TransformerTranslator(TransformerConfig(src_vocab=..., tgt_vocab=..., dim=64, num_heads=4))``."""

    kind = "transformer"
    alignment = ALIGNMENT

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.transformer = Transformer(config)

    @property
    def label(self) -> str:
        c = self.config
        return (f"transformer ({c.num_encoder_layers}+{c.num_decoder_layers} layers, {c.num_heads} heads, "
                f"dim {c.dim}, {c.positional} positions)")

    def config_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self.config)}

    # -- teacher forcing ----------------------------------------------------------------------
    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor, need_weights: bool = False):
        """src (b, s), src_mask (b, s), tgt_in (b, t) → logits (b, t, V) [, weights (b, t, s)]."""
        _check_source(src_mask)
        mask = Mask.padding(src_mask)  # one value for the encoder's and the decoder's layers
        memory = self.transformer.encode(src, mask)  # (b, s, dim)
        if not need_weights:
            return self.transformer.decode(tgt_in, memory, src_mask=mask)
        logits, w = self.transformer.decode(tgt_in, memory, src_mask=mask, need_weights=True)
        return logits, w.mean(1)  # (b, t, s): averaged over heads

    # -- the step interface ------------------------------------------------------------------
    def start(self, src: torch.Tensor, src_mask: torch.Tensor):
        """Encode once: memory {memory (b, s, dim), mask (b, s)}; state {length (b,)} (an empty cache)."""
        _check_source(src_mask)  # (memory keeps the (b, s) tensor, which beam search reorders; a step makes its value)
        memory = {"memory": self.transformer.encode(src, Mask.padding(src_mask)), "mask": src_mask}
        return memory, {"length": torch.zeros(src.shape[0], dtype=torch.long, device=src.device)}

    def step(self, memory, state, y_prev: torch.Tensor):
        """One token: y_prev (b,) → logits (b, V), the next state, weights (b, s) (see ``alignment``)."""
        n = len(self.transformer.decoder)
        length = int(state["length"][0]) if state["length"].numel() else 0
        cache = KVCache(n)
        cache.layers = [LayerCache.from_buffers(state.get(f"k.{i}"), state.get(f"v.{i}"), length) for i in range(n)]
        logits, w = self.transformer.decode(y_prev[:, None], memory["memory"], src_mask=Mask.padding(memory["mask"]),
                                            cache=cache, need_weights=True)  # (b, 1, V), (b, h, 1, s)
        new = {"length": state["length"] + 1}
        for i, layer in enumerate(cache.layers):
            new[f"k.{i}"], new[f"v.{i}"] = layer.buffers()
        return logits[:, 0], new, w[:, :, 0].mean(1)


def _check_source(src_mask: torch.Tensor) -> None:
    if src_mask.dim() != 2:
        raise ValueError(f"src_mask must be (b, s); got shape {tuple(src_mask.shape)}")
    if bool((src_mask.sum(1) == 0).any()):
        raise ValueError("every source sentence needs at least one token; got an empty one")


__all__ = ["TransformerTranslator", "ALIGNMENT"]
