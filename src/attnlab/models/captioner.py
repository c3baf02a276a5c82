"""An image captioner whose words attend to image regions (cross-attention).

Xu et al. 2015, "Show, Attend and Tell", https://arxiv.org/abs/1502.03044, with
Luong-style attention after the recurrent step (Luong et al. 2015,
https://arxiv.org/abs/1508.04025) and scaled dot-product scores (Vaswani et al. 2017).

    encoder:  V = CNN(image) + P          regions v_1 … v_n (n = g×g grid), (b, n, d)
    state:    s_0 = tanh(W_init mean_i v_i)
              s_t = GRU(E y_{t-1}, s_{t-1})                           (b, d)
    attend:   α_t = softmax((W_q s_t)(W_k V)ᵀ / √d_h)                  (b, h, n), sums to 1 over regions
              c_t = W_o concat_h(α_t (W_v V))                          (b, d)
    output:   p(y_t) = softmax(W_y tanh(W_c [s_t; c_t]))

The seeds' picture of cross-attention: the text's query s_t attends to the
image's keys/values; α_t says where the model looks when it writes word t.

| symbol | parameter |
|--------|-----------|
| W_q, W_k, W_v, W_o | ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` (``nn.Linear``, d → d) |
| P (region positions) | ``pos`` (n, d) |
| E, W_init, W_c, W_y | ``embed``, ``init``, ``combine``, ``out`` |

The attention step is ``attnlab.functional.multi_head_attention`` called with
this module's own projections (``num_heads`` heads; the maps returned are the
mean over heads, which still sums to 1). It is written so that a future
``attnlab.nn.MultiHeadAttention`` with the same four projections can replace
``_attend`` one for one. Shapes: images (b, 3, S, S) with S = ``image_size``;
tokens (b, T) → logits (b, T, vocab), weights (b, T, n).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ..multihead import multi_head_attention


@dataclass
class CaptionerConfig:
    vocab_size: int
    image_size: int = 32  # images are resized to S×S
    widths: tuple[int, ...] = (32, 64, 64)  # encoder stages; each halves the size: 32 → 4×4 regions
    d_model: int = 64
    num_heads: int = 1
    max_len: int = 12  # tokens generated at most (the <eos> included)

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

    def to_dict(self) -> dict:
        return {**asdict(self), "widths": list(self.widths)}


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
        self.pos = nn.Parameter(torch.randn(cfg.grid * cfg.grid, cfg.d_model) * 0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        f = self.proj(self.features(images))  # (b, d, g, g)
        return f.flatten(2).transpose(1, 2) + self.pos  # (b, n, d)


class Captioner(nn.Module):
    """CNN encoder → region features; GRU decoder with cross-attention to the regions."""

    def __init__(self, config: CaptionerConfig):
        super().__init__()
        config.validate()
        self.config = cfg = config
        d = cfg.d_model
        self.encoder = Encoder(cfg)
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.init = nn.Linear(d, d)
        self.gru = nn.GRU(d, d, batch_first=True)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))
        self.combine = nn.Linear(2 * d, d)
        self.out = nn.Linear(d, cfg.vocab_size)

    def _check(self, images: torch.Tensor) -> None:
        s = self.config.image_size
        if images.dim() != 4 or tuple(images.shape[1:]) != (3, s, s):
            raise ValueError(f"images must be (b, 3, {s}, {s}); got shape {tuple(images.shape)}")

    def _attend(self, s: torch.Tensor, regions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """s (b, T, d) attends to regions (b, n, d) → context (b, T, d), weights (b, T, n)."""
        ctx, w = multi_head_attention(
            s, regions, regions, num_heads=self.config.num_heads,
            w_q=self.q_proj.weight, b_q=self.q_proj.bias, w_k=self.k_proj.weight, b_k=self.k_proj.bias,
            w_v=self.v_proj.weight, b_v=self.v_proj.bias, w_o=self.o_proj.weight, b_o=self.o_proj.bias,
            need_weights=True,
        )  # (b, T, d), (b, h, T, n)
        return ctx, w.mean(dim=1)

    def _logits(self, s: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.combine(torch.cat([s, ctx], dim=-1))))  # (b, T, vocab)

    def _start(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._check(images)
        regions = self.encoder(images)  # (b, n, d)
        h0 = torch.tanh(self.init(regions.mean(dim=1)))[None]  # (1, b, d)
        return regions, h0

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: tokens (b, T) start with <bos>; → logits (b, T, vocab), weights (b, T, n)."""
        regions, h0 = self._start(images)
        s, _ = self.gru(self.embed(tokens), h0)  # (b, T, d)
        ctx, w = self._attend(s, regions)
        return self._logits(s, ctx), w

    @torch.no_grad()
    def generate(self, images: torch.Tensor, bos: int, eos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy decoding → tokens (b, L) (no <bos>; <eos> where a caption ends), weights (b, L, n)."""
        regions, h = self._start(images)
        y = torch.full((images.shape[0], 1), bos, dtype=torch.long, device=images.device)
        done = torch.zeros(images.shape[0], dtype=torch.bool, device=images.device)
        tokens, weights = [], []
        for _ in range(self.config.max_len):
            s, h = self.gru(self.embed(y), h)  # (b, 1, d)
            ctx, w = self._attend(s, regions)
            y = self._logits(s, ctx).argmax(-1)  # (b, 1)
            y = y.masked_fill(done[:, None], eos)
            tokens.append(y)
            weights.append(w)
            done |= y[:, 0] == eos
            if bool(done.all()):
                break
        return torch.cat(tokens, dim=1), torch.cat(weights, dim=1)


__all__ = ["Captioner", "CaptionerConfig", "Encoder"]
