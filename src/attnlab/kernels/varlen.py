"""Packed variable-length sequences: attention over documents laid end to end (``cu_seqlens``).

FlashAttention's ``flash_attn_varlen_func`` (Dao 2023, https://arxiv.org/abs/2307.08691) and
xFormers' ``BlockDiagonalMask``: instead of padding a batch of sequences of different lengths
to the longest, concatenate them into one row of ``total`` tokens and let each token attend
only its own document (a block-diagonal mask):

    o_i = Σ_{j : doc(j) = doc(i) [, j ≤ i]} softmax_j(q_i·k_j · scale) v_j

``cu_seqlens`` = [0, ℓ_1, ℓ_1 + ℓ_2, …, total] are the documents' boundaries, or a mask value
built once from them, ``attnlab.Mask.documents(cu_seqlens)``, which keeps the kernel's plan from call
to call (given the boundaries, the plan is made for this call only: nothing is kept between calls
but by the value). Here the mask is ``attnlab.patterns.documents(lengths, causal)``, computed by the block-sparse CPU kernel
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

import numbers

import torch

from .. import _checks
from ..functional.attention import attention
from ..mask import Mask
from ..patterns import Documents, documents
from .block_sparse import block_sparse_attention


def _pattern(cu_seqlens: torch.Tensor | list[int] | Mask, causal: bool, device: torch.device) -> Documents:
    """The packing's pattern: the mask value's plan (made once per value, with the kernel's plans on it),
    or made for this call from the boundaries."""
    if not isinstance(cu_seqlens, Mask):
        lengths = lengths_of(cu_seqlens, device)
        return documents(lengths if lengths else (0,), causal)
    m, held = cu_seqlens, cu_seqlens.document_lengths
    if held is None:
        raise ValueError(f"varlen_attention takes cu_seqlens or Mask.documents(cu_seqlens); got {m!r}")
    return m.plan(("documents pattern", causal), lambda: documents(held if held else (0,), causal))


_CU = "cu_seqlens must be non-decreasing integers starting at 0, [0, l_1, l_1 + l_2, …, total]"


def _boundaries(cu_seqlens: object, device: torch.device | None) -> torch.Tensor:
    """cu_seqlens as a 1-D integer tensor on the host (from a list, or a tensor on the CPU or ``device``)."""
    if isinstance(cu_seqlens, torch.Tensor):
        cu = cu_seqlens
        if cu.device.type == "meta" or cu.device.type not in ("cpu", getattr(device, "type", "cpu")):
            where = "the CPU" + ("" if device is None or device.type == "cpu" else f" or the inputs' device {device}")
            raise ValueError(f"{_CU}, on {where}; got a tensor on {cu.device}")
        if cu.dtype.is_floating_point or cu.dtype.is_complex or cu.dtype == torch.bool:
            raise ValueError(f"{_CU}; got {cu.tolist()} ({cu.dtype})")
    elif isinstance(cu_seqlens, (list, tuple)):
        if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in cu_seqlens):
            raise ValueError(f"{_CU}; got {list(cu_seqlens)}")
        cu = torch.tensor([int(x) for x in cu_seqlens], dtype=torch.long)
    else:
        raise ValueError(f"{_CU} (a 1-D integer tensor or list); got {type(cu_seqlens).__name__}")
    if cu.dim() != 1:
        raise ValueError(f"{_CU}, a 1-D tensor (docs + 1,); got shape {_checks.shape(cu)}")
    return cu.cpu()


def lengths_of(cu_seqlens: torch.Tensor | list[int], device: torch.device | None = None) -> tuple[int, ...]:
    """cu_seqlens [0, …, total] (docs + 1,) → the documents' lengths.

    ``device``: the inputs' device, where a cu_seqlens tensor may live besides the CPU."""
    cu = _boundaries(cu_seqlens, device)
    if cu.numel() < 1 or int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"{_CU}; got {cu.tolist()}")
    return tuple(int(x) for x in (cu[1:] - cu[:-1]))


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor | list[int] | Mask,
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
    _checks.floating(("query", "key", "value"), (query, key, value))
    if scale is not None:
        scale = _checks.scale(scale)
    pattern = _pattern(cu_seqlens, bool(causal), query.device)
    total = pattern.total
    if query.shape[:2] != key.shape[:2] or key.shape[:2] != value.shape[:2] or query.shape[0] != total:
        raise ValueError(
            f"query, key (total, h, d) and value (total, h, d_v) must share total = cu_seqlens[-1] = {total} and h; "
            f"got query {_checks.shape(query)}, key {_checks.shape(key)}, value {_checks.shape(value)}"
        )
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
