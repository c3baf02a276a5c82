"""Top-k attention: each query keeps its k highest-scoring keys (the seeds' dynamic selection).

    S(i) = top-k_j (q_i·k_j · scale)      o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j

The scores are computed in chunks of query rows to choose the keys (O(n²)
time, like any content-based choice, but O(chunk·n) memory); the attention
itself runs on the gathered k keys with ordinary autograd, so memory is
O(n·k·d). The choice is not differentiated (it is a hard selection, as in
"Explicit Sparse Transformer", Zhao et al. 2019, https://arxiv.org/abs/1912.11637).
Equal to dense attention masked with ``TopK.mask``.
"""

from __future__ import annotations

import math

import torch

from ..patterns import TopK
from ..softmax import masked_softmax

_ROW_BUDGET = 1 << 22  # score elements per chunk while choosing


@torch.no_grad()
def topk_indices(
    query: torch.Tensor,
    key: torch.Tensor,
    topk: TopK,
    *,
    scale: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """query (…, n, d), key (…, n, d) → (indices (…, n, k'), kept (…, n, k') bool), k' = min(k, n).

    ``key_padding_mask``: bool (…, n) broadcastable against the leading dimensions, True = real token.
    """
    n, d = key.shape[-2], query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    kk = min(topk.k, n)
    lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    rows = max(1, _ROW_BUDGET // max(1, n * math.prod(lead)))
    idx, ok = [], []
    cols = torch.arange(n, device=key.device)
    for s0 in range(0, query.shape[-2], rows):
        r = torch.arange(s0, min(query.shape[-2], s0 + rows), device=key.device)
        s = (query[..., r, :] * scale) @ key.transpose(-1, -2)  # (…, r, n)
        if topk.base is not None:
            s = s.masked_fill(~topk.base.allows(r[:, None], cols[None, :], n), float("-inf"))
        if key_padding_mask is not None:
            s = s.masked_fill(~key_padding_mask[..., None, :], float("-inf"))
        val, ix = s.topk(kk, dim=-1)
        idx.append(ix)
        ok.append(torch.isfinite(val))
    return torch.cat(idx, -2), torch.cat(ok, -2)


def topk_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    topk: TopK | int,
    *,
    scale: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Self-attention where each query attends its k best keys: (b, h, n, d) → (b, h, n, d_v).

    ``key_padding_mask``: bool (b, 1, n) or (b, h, n), True = real token.
    """
    topk = TopK(topk) if isinstance(topk, int) else topk
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    idx, ok = topk_indices(query, key, topk, scale=scale, key_padding_mask=key_padding_mask)  # (b, h, n, k)
    lead = idx.shape[:-2]
    n, kk = idx.shape[-2:]
    flat = idx.reshape(*lead, n * kk, 1)
    kg = key.expand(*lead, *key.shape[-2:]).gather(-2, flat.expand(*lead, n * kk, d)).reshape(*lead, n, kk, d)
    dv = value.shape[-1]
    vg = value.expand(*lead, *value.shape[-2:]).gather(-2, flat.expand(*lead, n * kk, dv)).reshape(*lead, n, kk, dv)
    s = (query.unsqueeze(-2) @ kg.transpose(-1, -2)).squeeze(-2) * scale  # (b, h, n, k)
    w = masked_softmax(s, ok)
    return (w.unsqueeze(-2) @ vg).squeeze(-2)  # (b, h, n, d_v)


__all__ = ["topk_attention", "topk_indices"]
