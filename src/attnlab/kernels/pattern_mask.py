"""A pattern AND a general bool mask: the tiles the pattern touches, each masked by its block of the mask.

    o_i = Σ_{j ∈ S(i), M_ij} softmax_j(q_i·k_j · scale) v_j     S(i) = keys the pattern allows, M the mask

Shape legend: b batch, h heads, n positions, d features, B the block size, nb = ⌈n/B⌉ blocks,
R query blocks of a group, m the key blocks of one query block.

``block_sparse_attention(q, k, v, pattern, mask=M)`` with M bool broadcastable to (b, h, n, n)
(True = may attend) comes here. On CPU (``masked_tiles_attention``) the pattern's tile plan runs
explicitly in torch ops (autograd gives the backward): for every group of query blocks, the key and
value blocks are gathered into (b, h, R, m·B, d), M's blocks for those tiles into (b, h, R, B, m·B)
(indexing a broadcast view: no (b, h, n, n) copy), and the scores are −∞ wherever the pattern or M
forbids. Cost and memory stay those of the pattern's tiles. Other devices use dense masked attention
through the core with ``pattern.materialize(n) & M`` (``dense_pattern_and_mask``).

Rows with no allowed key get a zero output and zero gradients. The core's non-finite rule
(``zero_nonfinite``, ``finish_nonfinite``): NaN/±inf in q, k and v are zeroed first, and the rows that
may attend (pattern AND M) a key or value row that held one, or whose own query did and may attend
some key, come out NaN and pass no gradient; a non-finite key or value where M forbids it reaches
nothing.
"""

from __future__ import annotations

from typing import TypeGuard

import torch
import torch.nn.functional as F

from .. import _checks
from ..functional.attention import attention, finish_nonfinite, zero_nonfinite
from ..functional.softmax import masked_softmax
from .plans import Plan
from .tiles import Tiles, _blocks, _Group, _take


def is_full_mask(mask: object) -> TypeGuard[torch.Tensor]:
    """True for a mask meant per (query, key) pair: a tensor of 3 or 4 dims that is not the
    (b, 1, 1, n) key-mask form (2-dim masks are (b, n) key masks)."""
    if not isinstance(mask, torch.Tensor) or mask.dim() not in (3, 4):
        return False
    return not (mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1)


def full_mask(mask: torch.Tensor, b: int, h: int, n: int, device: torch.device) -> torch.Tensor:
    """Check ``mask`` (bool, broadcastable to (b, h, n, n)) → a (b, h, n, n) broadcast view on ``device``."""
    if mask.dtype != torch.bool:
        raise ValueError(
            f"with a pattern, a full mask must be bool (True = may attend), broadcastable to (b, h, n, n) = "
            f"({b}, {h}, {n}, {n}); got dtype {mask.dtype}"
        )
    try:
        return mask.to(device).expand(b, h, n, n)
    except RuntimeError:
        raise ValueError(
            f"with a pattern, mask must be bool (b, n), (b, 1, 1, n) or broadcastable to (b, h, n, n) = "
            f"({b}, {h}, {n}, {n}); got shape {_checks.shape(mask)}"
        ) from None


def _group_allow(grp: _Group, M: torch.Tensor, n: int, B: int) -> torch.Tensor:
    """(b, h, R, B, m·B) bool: the pattern's allowed pairs of the group's tiles AND M's blocks of them."""
    rows = (grp.q_blocks[:, None] * B + torch.arange(B)).to(M.device)  # (R, B)
    cols = ((grp.k_blocks[:, :, None] * B + torch.arange(B)).flatten(1)).to(M.device)  # (R, m·B)
    inside = (rows < n)[:, :, None] & (cols < n)[:, None, :]  # (R, B, m·B)
    allow = M[:, :, rows.clamp(max=n - 1)[:, :, None], cols.clamp(max=n - 1)[:, None, :]] & inside
    if grp.allow is not None:
        allow = allow & grp.allow.to(M.device)
    return allow & grp.valid.to(M.device).repeat_interleave(B, 1)[:, None, :]


def _group(qg: torch.Tensor, kg: torch.Tensor, vg: torch.Tensor, allow: torch.Tensor, scale: float,
           dropout_p: float) -> torch.Tensor:
    """One group's output (b, h, R, B, d_v): softmax over the allowed scores, zero rows where none is."""
    p = masked_softmax((qg * scale) @ kg.transpose(-1, -2), allow)  # (b, h, R, B, m·B); zero rows where none
    if dropout_p > 0:
        p = F.dropout(p, dropout_p)
    return p @ vg


def masked_tiles_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: Tiles, M: torch.Tensor,
                           scale: float, dropout_p: float) -> torch.Tensor:
    """CPU: (b, h, n, d_v) over the plan's tiles AND the mask M (b, h, n, n) view; autograd for the backward."""
    b, h, n, _ = q.shape
    B, nb = tiles.block, tiles.n_blocks
    q, k, v, bad_q, bad = zero_nonfinite(q, k, v)  # (b, h, n) flags; the entries zeroed
    qb, kb, vb = _blocks(q, nb, B), _blocks(k, nb, B), _blocks(v, nb, B)
    badb = _blocks(bad[..., None].to(q.dtype), nb, B)[..., 0] > 0  # (b, h, nb, B)
    bad_qb = _blocks(bad_q[..., None].to(q.dtype), nb, B)[..., 0] > 0
    out = q.new_zeros(b, h, nb, B, v.shape[-1])
    hit = torch.zeros(b, h, nb, B, dtype=torch.bool)
    for grp in tiles.groups:
        allow = _group_allow(grp, M, n, B)  # (b, h, R, B, m·B)
        o = _group(_take(qb, grp.q_blocks), _take(kb, grp.k_blocks), _take(vb, grp.k_blocks), allow, scale,
                   dropout_p)
        out = out.index_copy(2, grp.q_blocks, o)
        bad_keys = badb[:, :, grp.k_blocks].flatten(3)[:, :, :, None, :]  # (b, h, R, 1, m·B)
        row_hit = (allow & bad_keys).any(-1) | (bad_qb[:, :, grp.q_blocks] & allow.any(-1))
        hit[:, :, grp.q_blocks] = row_hit
    out = out.flatten(2, 3)[:, :, :n]
    hit = hit.flatten(2, 3)[:, :, :n]
    return finish_nonfinite(out, hit, None)


def dense_pattern_and_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, M: torch.Tensor,
                           scale: float, dropout_p: float) -> torch.Tensor:
    """Any device: dense masked attention through the core with ``pattern.materialize(n) & M`` (O(n²))."""
    n = q.shape[-2]
    allow = plan.pattern.materialize(n, device=q.device) & M
    return attention(q, k, v, mask=allow, scale=scale, dropout_p=dropout_p)[0]


__all__ = ["is_full_mask", "full_mask", "masked_tiles_attention", "dense_pattern_and_mask"]
