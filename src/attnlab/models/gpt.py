"""``GPT``: a small decoder-only (GPT-style) causal language model.

Radford et al. 2018/2019 (GPT, GPT-2); the layout of Karpathy's nanoGPT:

    x_0 = E[tokens] (+ positions)                     (b, n, dim)
    x_l = Block_l(x_{l-1}),  Block = pre-norm causal self-attention + FFN (attnlab layers)
    logits = LN(x_L) Eᵀ                               (b, n, vocab)  (tied embeddings)
    p(t_{i+1} | t_{≤i}) = softmax(logits_i)

``positional`` picks how order enters: ``"learned"`` (GPT-2), ``"sinusoidal"``,
``"rope"`` (rotary, in every layer) or ``"alibi"`` (biases in every layer).
``generate`` samples with temperature and top-k and, by default, the key/value
cache (``attnlab.nn.KVCache``); ``attention_maps`` returns every layer's and
head's weights for the viewer, read from a trace (nothing is kept on the model).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .._limits import check_fields
from ..mask import Mask
from ..nn.backends import ContextParallel, Dense
from ..nn.cache import KVCache
from ..nn.layers import TransformerEncoderLayer
from ..nn.positional import POSITIONAL, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..trace import trace


@dataclass
class GPTConfig:
    vocab_size: int  # number of tokens
    block_size: int = 128  # the longest context the model is trained on
    dim: int = 128  # embedding width d_model
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int | None = None  # < num_heads: grouped-query attention
    ffn_dim: int | None = None  # default 4·dim
    dropout: float = 0.0
    positional: str = "learned"  # one of nn.positional.POSITIONAL

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges (attnlab._limits)
        if self.positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {tuple(POSITIONAL)}; got {self.positional!r}")
        for name in ("vocab_size", "block_size", "dim", "num_layers", "num_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")


class GPT(nn.Module):
    """``forward(tokens (b, n), *, cache=None) → logits (b, n, vocab)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.tok = nn.Embedding(c.vocab_size, c.dim)
        if c.positional == "learned":
            self.pos: nn.Module | None = LearnedPositionalEmbedding(c.block_size, c.dim)
        elif c.positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(c.dim)
        else:
            self.pos = None
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerEncoderLayer(
                c.dim, c.num_heads, ffn_dim=c.ffn_dim, dropout=c.dropout, activation="gelu", norm_first=True,
                num_kv_heads=c.num_kv_heads, rope=c.positional == "rope", alibi=c.positional == "alibi",
            )
            for _ in range(c.num_layers)
        )
        self.norm = nn.LayerNorm(c.dim)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def new_cache(self) -> KVCache:
        return KVCache(self.config.num_layers)

    def context_parallel(self, group=None, *, mode: str = "ring", layout: str = "zigzag") -> GPT:
        """Attend over one sequence sharded across the processes of ``group`` (``torch.distributed``).

        Every block's attention gets the ``ContextParallel`` backend; then ``forward`` takes this
        rank's shard of the tokens (``attnlab.distributed.shard(tokens, dim=1, layout=layout)``) with
        ``positions=attnlab.distributed.positions(n, W, rank, layout)``, and its logits are the matching
        rows of the whole sequence's. Rotary positions need ``layout="contiguous"``; ALiBi is refused."""
        for block in self.blocks:
            block.self_attn.backend = ContextParallel(group, mode=mode, layout=layout)
        return self

    def whole_sequence(self) -> GPT:
        """Back to one process: every block's attention gets the ``Dense`` backend again."""
        for block in self.blocks:
            block.self_attn.backend = Dense()
        return self

    def forward(self, tokens: torch.Tensor, *, cache: KVCache | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (b, n) → logits (b, n, vocab); ``positions`` (n,): the tokens' positions in the
        sequence when they are a shard of it (context parallelism), else 0 … n − 1 after the cache."""
        if tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int32, torch.int64):
            raise ValueError(f"tokens must be (b, n) integer ids; got shape {tuple(tokens.shape)} dtype {tokens.dtype}")
        offset = 0 if cache is None else cache.length
        if positions is None and self.config.positional == "learned" and offset + tokens.shape[1] > self.config.block_size:
            raise ValueError(
                f"{offset + tokens.shape[1]} positions exceed block_size={self.config.block_size} "
                "of the learned position table; crop the input"
            )
        x = self.tok(tokens)  # (b, n, dim)
        if self.pos is not None:
            x = self.pos(x, offset, positions=positions)
        x = self.drop(x)
        mask = Mask.causal()  # built once per forward, passed to every layer (aligned to each call: after the cache)
        for i, block in enumerate(self.blocks):
            x = block(x, mask=mask, cache=None if cache is None else cache[i])
        return F.linear(self.norm(x), self.tok.weight)  # (b, n, vocab), tied to the embedding

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        logits = self(tokens, positions=positions)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` after ``prompt`` (b, n) → (b, n + max_new_tokens).

        ``temperature=0`` is greedy. With the cache each step runs one token through the
        model; when the context reaches ``block_size`` the cache is refilled with the
        last half block (the model never sees more than ``block_size`` tokens).
        ``stream`` gives the same tokens one at a time, as they are drawn.
        """
        steps = self.stream(prompt, max_new_tokens, temperature=temperature, top_k=top_k, use_cache=use_cache,
                            generator=generator)
        return torch.cat([prompt, *steps], dim=1)

    def stream(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Iterator[torch.Tensor]:
        """``generate``'s tokens one at a time: an iterator of the sampled ids (b, 1), each as soon
        as it is drawn (the arguments are checked now, before the first step)."""
        if prompt.dim() != 2 or prompt.shape[1] < 1:
            raise ValueError(f"prompt must be (b, n) with n >= 1; got {tuple(prompt.shape)}")
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0; got {temperature}")
        if top_k is not None and top_k < 1:
            raise ValueError(f"top_k must be >= 1; got {top_k}")
        return self._steps(prompt, max_new_tokens, temperature, top_k, use_cache, generator)

    @torch.no_grad()
    def _steps(self, out: torch.Tensor, max_new_tokens: int, temperature: float, top_k: int | None,
               use_cache: bool, generator: torch.Generator | None) -> Iterator[torch.Tensor]:
        was_training = self.training
        self.eval()
        block = self.config.block_size
        cache = self.new_cache() if use_cache else None
        feed = out[:, -block:]
        try:
            for _ in range(max_new_tokens):
                if cache is not None:
                    if cache.length + feed.shape[1] > block:
                        cache.reset()
                        feed = out[:, -max(1, block // 2):]
                    logits = self(feed, cache=cache)[:, -1]
                else:
                    logits = self(out[:, -block:])[:, -1]  # (b, vocab)
                nxt = sample(logits, temperature=temperature, top_k=top_k, generator=generator)  # (b, 1)
                out = torch.cat([out, nxt], dim=1)
                feed = nxt
                yield nxt
        finally:
            self.train(was_training)


def sample(
    logits: torch.Tensor, *, temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits (b, vocab) → next token ids (b, 1): greedy for temperature 0, else softmax(logits / T) over the top k."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    # shifted to <= 0 first, so that a tiny T cannot overflow (T is floored where float32 would read it as 0)
    logits = (logits.float() - logits.float().amax(-1, keepdim=True)) / max(temperature, 1e-30)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)


@torch.no_grad()
def attention_maps(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """Every layer's and head's attention weights for one sequence: (layers, h, q, k).

    tokens: (n,) or (1, n). The weights come from the reference path's trace
    (step ``"weights"`` of each layer, in order), so they are exactly what the
    model computed; rows sum to 1 over the keys a query may see.
    """
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    if tokens.dim() != 2 or tokens.shape[0] != 1:
        raise ValueError(f"attention_maps takes one sequence, (n,) or (1, n); got {tuple(tokens.shape)}")
    was_training = model.training
    model.eval()
    with trace() as t:
        model(tokens)
    model.train(was_training)
    maps = [s.value[0] for s in t if s.name == "weights"]  # each (h, q, k)
    return torch.stack(maps)  # (layers, h, q, k)


__all__ = ["GPT", "GPTConfig", "POSITIONAL", "sample", "attention_maps"]
