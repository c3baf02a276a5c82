"""An image captioner whose words attend to image regions (cross-attention).

Xu et al. 2015, "Show, Attend and Tell", https://arxiv.org/abs/1502.03044, with
Luong-style attention after the recurrent step and input feeding (Luong et al.
2015, https://arxiv.org/abs/1508.04025), scaled dot-product scores over h heads
(Vaswani et al. 2017) through ``attnlab.nn.CrossAttention``.

    encoder:  V = CNN(image) + P           regions v_1 … v_n (n = g×g grid), (b, n, d)
    state:    s_0 = learned vector;  h̃_0 = 0
              s_t = GRU([E y_{t-1}; h̃_{t-1}], s_{t-1})                       (b, d)
    attend:   c_t, α_t = CrossAttention(query=s_t, context=V)                 α_t: (b, h, n), sums to 1
    output:   h̃_t = tanh(W_c [s_t; c_t]);   p(y_t) = softmax(W_y h̃_t)

The second tutorial's picture of cross-attention: the text's query s_t attends to the
image's keys/values; α_t says where the model looks when it writes word t.
Two choices make the maps mean something: the decoder's start state does not
see the image (so what it writes must come through α), and input feeding
(h̃_{t-1} into the next step) tells it where it looked last, so it can move on.

| symbol | parameter |
|--------|-----------|
| W_q, W_k, W_v, W_o | ``attn`` (``attnlab.nn.CrossAttention``: ``in_proj_weight``, ``out_proj``) |
| P (region positions) | ``encoder.pos`` (n, d) |
| s_0, E, W_c, W_y | ``decoder.start``, ``decoder.embed``, ``decoder.combine``, ``decoder.out`` |

``decoder="transformer"`` swaps the GRU for a stack of pre-norm
``attnlab.nn.layers.TransformerDecoderLayer`` (causal self-attention over the
words so far, cross-attention to V, feed-forward); its maps are the last
layer's cross-attention weights. Generation recomputes the prefix each step
(captions are a dozen tokens at most).

Shapes: images (b, 3, S, S) with S = ``image_size``; tokens (b, T) → logits
(b, T, vocab), weights (b, h, T, n) per head (``.mean(1)`` for one map per word;
the mean over heads still sums to 1 over regions).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..nn.layers import TransformerDecoderLayer
from ..nn.multihead import CrossAttention


@dataclass
class CaptionerConfig:
    vocab_size: int
    image_size: int = 32  # images are resized to S×S
    widths: tuple[int, ...] = (32, 64, 64)  # encoder stages; each halves the size: 32 → 4×4 regions
    d_model: int = 64
    num_heads: int = 1
    max_len: int = 12  # tokens generated at most (the <eos> included)
    decoder: str = "gru"  # gru | transformer (see DECODERS)
    layers: int = 2  # transformer decoder layers

    @property
    def grid(self) -> int:
        return self.image_size // 2 ** len(self.widths)

    def validate(self) -> None:
        if self.vocab_size < 5:
            raise ValueError(f"vocab_size must be at least 5 (4 special tokens + 1 word); got {self.vocab_size}")
        if self.grid < 1 or self.image_size % 2 ** len(self.widths):
            raise ValueError(
                f"image_size {self.image_size} must be divisible by 2^{len(self.widths)} "
                f"(one halving per encoder stage, widths={self.widths})"
            )
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")
        if self.decoder not in DECODERS:
            raise ValueError(f"decoder must be one of {', '.join(DECODERS)}; got {self.decoder!r}")
        if self.layers < 1:
            raise ValueError(f"layers must be >= 1; got {self.layers}")


class Encoder(nn.Module):
    """conv3×3 → BN → ReLU → max-pool per stage, then a 1×1 projection to d: regions (b, g·g, d)."""

    def __init__(self, cfg: CaptionerConfig):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for c in cfg.widths:
            layers += [nn.Conv2d(c_in, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.proj = nn.Conv2d(c_in, cfg.d_model, 1)
        self.pos = nn.Parameter(torch.randn(cfg.grid * cfg.grid, cfg.d_model) * 0.1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        f = self.proj(self.features(images))  # (b, d, g, g)
        return f.flatten(2).transpose(1, 2) + self.pos  # (b, n, d)


class GRUDecoder(nn.Module):
    """s_t = GRU([E y_{t-1}; h̃_{t-1}], s_{t-1}); c_t, α_t = CrossAttention(s_t, V); h̃_t = tanh(W_c [s_t; c_t])."""

    def __init__(self, cfg: CaptionerConfig):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.start = nn.Parameter(torch.zeros(d))
        self.gru = nn.GRUCell(2 * d, d)
        self.attn = CrossAttention(d, cfg.num_heads)
        self.combine = nn.Linear(2 * d, d)
        self.out = nn.Linear(d, cfg.vocab_size)

    def begin(self, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, d = regions.shape[0], regions.shape[-1]
        return self.start.expand(b, d), regions.new_zeros(b, d)

    def step(self, y_prev, state, regions):
        """One word: y_prev (b,), state (s, h̃) → logits (b, vocab), state, weights (b, h, n)."""
        s, feed = state
        s = self.gru(torch.cat([self.embed(y_prev), feed], dim=-1), s)  # (b, d)
        ctx, w = self.attn(s[:, None], regions, need_weights=True)  # (b, 1, d), (b, h, 1, n)
        feed = torch.tanh(self.combine(torch.cat([s, ctx[:, 0]], dim=-1)))  # (b, d)
        return self.out(feed), (s, feed), w[:, :, 0]

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state, logits, weights = self.begin(regions), [], []
        for t in range(tokens.shape[1]):
            lg, state, w = self.step(tokens[:, t], state, regions)
            logits.append(lg)
            weights.append(w)
        return torch.stack(logits, 1), torch.stack(weights, 2)  # (b, T, vocab), (b, h, T, n)


class TransformerDecoder(nn.Module):
    """Pre-norm ``TransformerDecoderLayer`` stack over word + position embeddings; maps of the last layer."""

    def __init__(self, cfg: CaptionerConfig):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.pos = nn.Parameter(torch.randn(cfg.max_len + 1, d) * 0.02)
        self.layers = nn.ModuleList(
            TransformerDecoderLayer(d, cfg.num_heads, ffn_dim=2 * d, dropout=0.0, norm_first=True)
            for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, cfg.vocab_size)

    @staticmethod
    def _layer(layer: TransformerDecoderLayer, x, memory):
        """TransformerDecoderLayer.forward (pre-norm, causal, no dropout) that keeps the cross-attention weights."""
        x = x + layer.self_attn(layer.norm1(x), causal=True)[0]
        ctx, w = layer.multihead_attn(layer.norm2(x), memory, need_weights=True)  # (b, T, d), (b, h, T, n)
        x = x + ctx
        return x + layer.linear2(layer.activation(layer.linear1(layer.norm3(x)))), w

    def forward(self, regions: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if tokens.shape[1] > self.pos.shape[0]:
            raise ValueError(f"at most {self.pos.shape[0]} tokens; got {tokens.shape[1]}")
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # (b, T, d)
        for layer in self.layers:
            x, w = self._layer(layer, x, regions)
        return self.out(self.norm(x)), w  # (b, T, vocab), (b, h, T, n)


DECODERS = {"gru": GRUDecoder, "transformer": TransformerDecoder}


class Captioner(nn.Module):
    """CNN encoder → region features; a decoder (GRU or Transformer) whose words query the regions."""

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = DECODERS[config.decoder](config)

    def _check(self, images: torch.Tensor) -> None:
        s = self.config.image_size
        if images.dim() != 4 or tuple(images.shape[1:]) != (3, s, s):
            raise ValueError(f"images must be (b, 3, {s}, {s}); got shape {tuple(images.shape)}")

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: tokens (b, T) start with <bos>; → logits (b, T, vocab), weights (b, h, T, n)."""
        self._check(images)
        return self.decoder(self.encoder(images), tokens)

    @torch.no_grad()
    def generate(self, images: torch.Tensor, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding → tokens (b, L) (no <bos>; <eos> where a caption ends), weights (b, h, L, n)."""
        self._check(images)
        regions = self.encoder(images)  # (b, n, d)
        b = images.shape[0]
        y = torch.full((b,), bos, dtype=torch.long, device=images.device)
        done = torch.zeros(b, dtype=torch.bool, device=images.device)
        gru = isinstance(self.decoder, GRUDecoder)
        state = self.decoder.begin(regions) if gru else None
        prefix = y[:, None]
        tokens, weights = [], []
        for _ in range(self.config.max_len):
            if gru:
                lg, state, w = self.decoder.step(y, state, regions)
            else:  # the whole prefix again; the last position's logits and maps
                lg, w = self.decoder(regions, prefix)
                lg, w = lg[:, -1], w[:, :, -1]
            y = lg.argmax(-1).masked_fill(done, eos)  # (b,)
            tokens.append(y)
            weights.append(w)
            prefix = torch.cat([prefix, y[:, None]], 1)
            done |= y == eos
            if bool(done.all()):
                break
        return torch.stack(tokens, 1), torch.stack(weights, 2)


__all__ = ["Captioner", "CaptionerConfig", "Encoder", "GRUDecoder", "TransformerDecoder", "DECODERS"]
