"""Packed variable-length sequences: attention over documents laid end to end (``cu_seqlens``).

FlashAttention's ``flash_attn_varlen_func`` (Dao 2023, https://arxiv.org/abs/2307.08691) and
xFormers' ``BlockDiagonalMask``: instead of padding a batch of sequences of different lengths
to the longest, concatenate them into one row of ``total`` tokens and let each token attend
only its own document (a block-diagonal mask):

    o_i = Σ_{j : doc(j) = doc(i) [, j ≤ i]} softmax_j(q_i·k_j · scale) v_j

``cu_seqlens`` = [0, ℓ_1, ℓ_1 + ℓ_2, …, total] are the documents' boundaries. Here the mask is
``attnlab.patterns.documents(lengths, causal)``, computed by the block-sparse CPU kernel
(``attnlab.kernels.block_sparse_attention``), which visits only the B × B tiles that hold a pair
of one document: the cost is Σ ℓ_d² (plus tile rounding), not b · max(ℓ)² as in the padded batch.

| FlashAttention          | argument                  |
|-------------------------|---------------------------|
| q, k, v (total, h, d)   | ``query``, ``key``, ``value`` |
| cu_seqlens_q = _k       | ``cu_seqlens`` (docs + 1,) int |
| causal, softmax_scale   | ``causal``, ``scale``     |

Shapes: query, key (total, h, d), value (total, h, d_v) → (total, h, d_v); weights (on
request) (h, total, total), zero across documents. Caveats: self-attention only (one
``cu_seqlens`` for queries and keys); the weights path builds the dense (total, total) mask.
"""

from __future__ import annotations

import functools

import torch

from .. import _checks
from ..functional.attention import attention
from ..patterns import Documents, documents
from .block_sparse import block_sparse_attention


@functools.lru_cache(maxsize=64)
def _pattern(lengths: tuple[int, ...], causal: bool) -> Documents:
    return documents(lengths, causal)  # one object per packing, so the kernel's plan is reused


def lengths_of(cu_seqlens: torch.Tensor | list[int]) -> tuple[int, ...]:
    """cu_seqlens [0, …, total] (docs + 1,) → the documents' lengths."""
    cu = torch.as_tensor(cu_seqlens).flatten()
    if cu.numel() < 1 or cu.dtype.is_floating_point or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(
            f"cu_seqlens must be non-decreasing integers starting at 0, [0, l_1, l_1 + l_2, …, total]; got {cu.tolist()}"
        )
    return tuple(int(x) for x in (cu[1:] - cu[:-1]))


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor | list[int],
    *,
    causal: bool = False,
    scale: float | None = None,
    block: int = 64,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention of packed documents, each only within itself: ``(output (total, h, d_v), weights or None)``."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        _checks.tensor(name, t, 3)
        if t.dim() != 3:
            raise ValueError(f"{name} must be packed (total, h, d); got shape {_checks.shape(t)}")
    lengths = lengths_of(cu_seqlens)
    total = sum(lengths)
    if query.shape[:2] != key.shape[:2] or key.shape[:2] != value.shape[:2] or query.shape[0] != total:
        raise ValueError(
            f"query, key (total, h, d) and value (total, h, d_v) must share total = cu_seqlens[-1] = {total} and h; "
            f"got query {_checks.shape(query)}, key {_checks.shape(key)}, value {_checks.shape(value)}"
        )
    pattern = _pattern(lengths if lengths else (0,), bool(causal))
    q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (query, key, value))  # (1, h, total, d)
    if need_weights:
        mask = pattern.materialize(total, device=query.device)  # (total, total)
        out, w = attention(q, k, v, mask=mask, scale=scale, need_weights=True)
        assert w is not None  # asked for
        return out[0].transpose(0, 1), w[0]
    if total == 0:
        return value.new_zeros(0, *value.shape[1:]), None
    out, _ = block_sparse_attention(q, k, v, pattern, block=block, scale=scale)  # (1, h, total, d_v)
    return out[0].transpose(0, 1), None


__all__ = ["varlen_attention", "lengths_of"]
