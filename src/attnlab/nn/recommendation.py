"""Attention for recommendation: DIN's target attention and SASRec's causal self-attention.

**Target attention** (Deep Interest Network; Zhou et al. 2018, "Deep Interest Network for
Click-Through Rate Prediction", https://arxiv.org/abs/1706.06978, section 4.3): the candidate
item attends over the user's history. DIN's *activation unit* scores each history item with a
small MLP over the pair and its interactions:

    a_j = MLP([e_j, v_A, e_j − v_A, e_j ⊙ v_A])          (b, n)   one score per history item
    normalise="softmax":  w = softmax(a over the real items)      (the usual attention)
    normalise="none":     w_j = a_j · m_j                          (DIN's own: no softmax, eq. 3)
    v_U(A) = Σ_j w_j e_j                                   (b, d)   the user's interest in A

DIN keeps the raw scores on purpose ("the normalization with softmax is abandoned ... to
reserve the intensity of user interests"); both are here. The MLP is Linear → PReLU → Linear
(the paper's activation unit uses PReLU or Dice; Dice is not implemented).

| paper (DIN)         | here                        | shape        |
|---------------------|-----------------------------|--------------|
| v_A (ad / candidate)| ``candidate``               | (b, d)       |
| e_1 … e_H (behaviors)| rows of ``history``        | (b, n, d)    |
| H (history length)  | n                           |              |
| a(e_j, v_A)         | ``weights`` (normalised or not) | (b, n)   |
| v_U(A)              | the pooled output           | (b, d)       |
| activation unit     | ``unit`` (Linear 4d → ``hidden_dim``, PReLU, Linear → 1) | |

The padding mask is (b, n) bool, True = a real history item. With ``"softmax"`` the scores go
through ``attnlab.attention`` (the core), so the library's contract holds: a fully padded history
gives zero weights and a zero output, and NaN or inf in padded rows reaches neither the output
nor a gradient. With ``"none"`` the padded rows are replaced by zeros (``torch.where``) before
any arithmetic and their weights are zero.

**SASRec** (Kang & McAuley 2018, "Self-Attentive Sequential Recommendation",
https://arxiv.org/abs/1808.09781, section III): item embeddings plus learned positions,
then blocks of causal self-attention and a point-wise feed-forward network, each behind a
layer norm with a residual connection (eqs. 2–4 and III-D):

    Ê = M_{s_t} · √d + P_t                        (b, n, d)   input embedding
    S = E + MHA(LN(E)),  F = S + FFN(LN(S))      (b, n, d)   one block (causal, padding masked)
    FFN(x) = ReLU(x W⁽¹⁾ + b⁽¹⁾) W⁽²⁾ + b⁽²⁾
    r_{i,t} = F_t · M_i                           relevance of item i at step t (shared embedding)

| paper (SASRec)      | here                               | shape     |
|---------------------|------------------------------------|-----------|
| M (item embedding)  | ``SASRec.item_embedding.weight``   | (items + 1, d), row 0 = padding |
| P (positions)       | ``SASRec.position_embedding.weight`` | (max_len, d) |
| b (blocks)          | ``num_layers``                     |           |
| W⁽¹⁾, W⁽²⁾          | ``SASRecBlock.ffn[0]``, ``ffn[2]`` | (d, d)    |
| F_t^{(b)}           | ``SASRec.forward`` output, row t   | (b, n, d) |
| r_{i,t}             | ``SASRec.score(states, items)``    | (b, m)    |

Item id 0 is padding in ``SASRec`` (as in the authors' code); a padded position's output is zero.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from ..functional.nonfinite import map_finite_rows
from ..functional.target import din_features, target_attention
from .multihead import MultiHeadAttention
from .registry import register

NORMALISE = ("softmax", "none")


def _padding(mask: torch.Tensor | None, b: int, n: int, device: torch.device) -> torch.Tensor | None:
    """Check a (b, n) bool padding mask (True = real) and return it (None stays None)."""
    if mask is None:
        return None
    _checks.tensor("mask", mask)
    if mask.dtype != torch.bool or tuple(mask.shape) != (b, n):
        raise ValueError(f"mask must be a (b, n) = ({b}, {n}) bool tensor, True = a real item; "
                         f"got {tuple(mask.shape)} {mask.dtype}")
    return mask.to(device)


def item_ids(name: str, items: object, num_items: int) -> torch.Tensor:
    """A 2-D integer tensor of item ids in [0, num_items] (0 = padding); returns it."""
    items = _checks.tensor(name, items)
    if items.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be an integer tensor of item ids; got dtype {items.dtype}")
    if items.dim() != 2:
        raise ValueError(f"{name} must be (b, n) item ids; got shape {_checks.shape(items)}")
    if items.numel() and (int(items.min()) < 0 or int(items.max()) > num_items):
        raise ValueError(f"{name}: item ids must be in [0, {num_items}] (0 = padding); "
                         f"got [{int(items.min())}, {int(items.max())}]")
    return items


@register("target-attention", functional=target_attention, supports=("mask", "weights"))
class TargetAttention(nn.Module):
    """DIN's target attention: ``TargetAttention(dim, hidden_dim=36, normalise="softmax")``.

    forward(candidate (b, d), history (b, n, d), *, mask=(b, n) bool or None, need_weights=False)
    → pooled (b, d) [, weights (b, n)].
    """

    def __init__(self, dim: int, *, hidden_dim: int = 36, normalise: str = "softmax"):
        super().__init__()
        self.dim = _checks.integer("dim", dim)
        self.hidden_dim = _checks.integer("hidden_dim", hidden_dim)
        if normalise not in NORMALISE:
            raise ValueError(f"normalise must be one of {NORMALISE}; got {normalise!r}")
        self.normalise = normalise
        self.unit = nn.Sequential(nn.Linear(4 * dim, hidden_dim), nn.PReLU(), nn.Linear(hidden_dim, 1))

    def activation_unit(self, candidate: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """a_j = MLP([e_j, v_A, e_j − v_A, e_j ⊙ v_A]): candidate (..., 1 | n, d), history (..., n, d) → (..., n)."""
        return self.unit(din_features(candidate, history)).squeeze(-1)

    def _check(self, candidate: torch.Tensor, history: torch.Tensor) -> None:
        _checks.floating(("candidate", "history"), (candidate, history))
        d = self.dim
        if candidate.dim() != 2 or history.dim() != 3 or candidate.shape != (history.shape[0], d) or history.shape[-1] != d:
            raise ValueError(f"candidate must be (b, d) and history (b, n, d) with d = {d}; "
                             f"got candidate {tuple(candidate.shape)}, history {tuple(history.shape)}")
        _checks.module_input(self, ("candidate", "history"), (candidate, history))

    def forward(
        self,
        candidate: torch.Tensor,
        history: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._check(candidate, history)
        b, n = history.shape[:2]
        mask = _padding(mask, b, n, history.device)
        first, prelu, last = self.unit
        assert isinstance(first, nn.Linear) and isinstance(prelu, nn.PReLU) and isinstance(last, nn.Linear)
        pooled, w = target_attention(candidate, history, first.weight, first.bias, prelu.weight, last.weight, last.bias,
                                     mask=mask, normalise=self.normalise)
        return pooled, (w if need_weights else None)  # (b, d), (b, n)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, hidden_dim={self.hidden_dim}, normalise={self.normalise!r}"


@register("sasrec-block", supports=("mask", "causal", "weights"))
class SASRecBlock(nn.Module):
    """One SASRec block: ``S = x + MHA(LN(x))``, ``F = S + FFN(LN(S))``, padded rows zero.

    forward(x (b, n, d), mask (b, n) bool or None, causal=True, need_weights=False)
    → (out (b, n, d), weights (b, h, n, n) or None).
    """

    def __init__(self, dim: int, num_heads: int = 1, *, dropout: float = 0.0):
        super().__init__()
        dim, num_heads = _checks.integer("dim", dim), _checks.integer("num_heads", num_heads)
        dropout = _checks.probability("dropout", dropout)
        self.attn = MultiHeadAttention(dim, num_heads, attn_drop=dropout, proj_drop=dropout)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.Dropout(dropout))

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = True,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _checks.floating(("x",), (x,))
        if x.dim() != 3:
            raise ValueError(f"x must be (b, n, d); got {tuple(x.shape)}")
        _checks.module_input(self, ("x",), (x,))
        mask = _padding(mask, x.shape[0], x.shape[1], x.device)
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        if mask is not None:  # padded items are zeros before any arithmetic
            x = torch.where(mask.unsqueeze(-1), x, zero)
        # a NaN/inf token stays out of the norms and the FFN (its own row comes out NaN)
        a, w = self.attn(map_finite_rows(self.norm1, x), mask=mask, causal=causal, need_weights=need_weights)
        s = x + a  # (b, n, d)
        out = s + map_finite_rows(lambda t: self.ffn(self.norm2(t)), s)
        if mask is not None:
            out = torch.where(mask.unsqueeze(-1), out, zero)
        return out, w


class SASRec(nn.Module):
    """SASRec: ``SASRec(num_items, dim, max_len, num_layers=2, num_heads=1, dropout=0.0)``.

    forward(items (b, n) long, 0 = padding) → states (b, n, d): position t has seen items ≤ t only.
    ``score(states (b, d), items (b, m))`` → (b, m): r = F · M_i.
    """

    def __init__(self, num_items: int, dim: int, max_len: int, *, num_layers: int = 2, num_heads: int = 1,
                 dropout: float = 0.0):
        super().__init__()
        self.num_items = _checks.integer("num_items", num_items)
        self.max_len = _checks.integer("max_len", max_len)
        dim, num_layers = _checks.integer("dim", dim), _checks.integer("num_layers", num_layers)
        num_heads, dropout = _checks.integer("num_heads", num_heads), _checks.probability("dropout", dropout)
        self.item_embedding = nn.Embedding(num_items + 1, dim, padding_idx=0)
        with torch.no_grad():  # entries of scale d^-1/2: the input M·√d has unit entries
            self.item_embedding.weight.normal_(0.0, dim ** -0.5)[0].zero_()
        self.position_embedding = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(SASRecBlock(dim, num_heads, dropout=dropout) for _ in range(num_layers))
        self.norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, items: torch.Tensor, *, need_weights: bool = False
                ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """items (b, n) → states (b, n, d); with ``need_weights``, also each block's weights (b, h, n, n)."""
        item_ids("items", items, self.num_items)
        if items.shape[1] > self.max_len:
            raise ValueError(f"items must be (b, n) with n ≤ max_len = {self.max_len}; got {tuple(items.shape)}")
        mask = items != 0  # (b, n) True = a real item
        pos = torch.arange(items.shape[1], device=items.device)
        x = self.dropout(self.item_embedding(items) * self.item_embedding.embedding_dim ** 0.5 + self.position_embedding(pos))
        weights = []
        for block in self.blocks:
            x, w = block(x, mask=mask, causal=True, need_weights=need_weights)
            weights.append(w)
        out = self.norm(x)
        out = torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))
        return (out, weights) if need_weights else out

    def score(self, states: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """r = F · M_i: states (b, d), items (b, m) long → (b, m)."""
        item_ids("items", items, self.num_items)
        d = self.item_embedding.embedding_dim
        _checks.tensor("states", states)
        if states.dim() != 2 or tuple(states.shape) != (items.shape[0], d):
            raise ValueError(f"states must be (b, d) = ({items.shape[0]}, {d}), one row per row of items "
                             f"{_checks.shape(items)}; got {_checks.shape(states)}")
        _checks.module_input(self, ("states",), (states,))
        return (self.item_embedding(items) * states.unsqueeze(1)).sum(-1)


__all__ = ["TargetAttention", "SASRecBlock", "SASRec", "item_ids"]
