"""flex attention's ``BlockMask`` of a pattern, built from the pattern's own block structure.

    BlockMask(pattern, n) = for each (query tile, key tile): empty, partial (flex applies the mask
                            function inside) or full (every pair allowed, no mask function)

The tiles come from ``pattern.block_layout`` (a superset of what the pattern touches), each
classified by evaluating its B² pairs, or from a window's bounds alone: the work grows with the
tiles the pattern touches (about n·w / B² for a window), never with n². A ``Plan``
(``kernels/plans.py``) holds the mask it builds; ``kernels/devices.py`` runs flex with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..patterns import Combined, Documents, GlobalTokens, Pattern, Window

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

IndexFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q_idx, kv_idx) -> bool
FLEX_BLOCK = 128  # flex's tile on CUDA


def block_mask(pattern: Pattern, n: int, device: torch.device | str, block: int = FLEX_BLOCK) -> BlockMask:
    """The flex ``BlockMask`` of ``pattern`` at length n on ``device``, built anew (a ``Plan`` holds the
    one it builds: ``Plan.block_mask``).

    Built from the pattern's own block structure (``tile_kinds``), never by evaluating the mask at
    all n² pairs; the tiles whose every pair is allowed become flex's *full* blocks (no mask
    function inside). flex's index tables are (n/B)² int32 each (four of them), the same as
    ``create_block_mask`` keeps."""
    from torch.nn.attention.flex_attention import BlockMask

    device = torch.device(device)
    allows = _index_fn(pattern, n, device)

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return allows(q_idx, kv_idx)

    tiles, kind = tile_kinds(pattern, n, block, "cpu")  # (planned on the host, then moved: any device)
    nb = -(-n // block)
    part, full = tiles[kind == 1], tiles[kind == 2]
    return BlockMask(
        seq_lengths=(n, n),
        kv_num_blocks=_counts(part[:, 0], nb), kv_indices=_table(part, nb),
        full_kv_num_blocks=_counts(full[:, 0], nb), full_kv_indices=_table(full, nb),
        q_num_blocks=_counts(part[:, 1], nb), q_indices=_table(part.flip(-1), nb),
        full_q_num_blocks=_counts(full[:, 1], nb), full_q_indices=_table(full.flip(-1), nb),
        BLOCK_SIZE=(block, block), mask_mod=mask_mod,
    ).to(device)


def _counts(rows: torch.Tensor, nb: int) -> torch.Tensor:
    """(t,) row of each tile → flex's (1, 1, nb) int32 tiles per row."""
    return torch.bincount(rows, minlength=nb).to(torch.int32)[None, None]


def _table(tiles: torch.Tensor, nb: int) -> torch.Tensor:
    """(t, 2) (row, column) tiles → flex's (1, 1, nb, nb) int32: each row's columns, ascending, first
    (the rest of a row is never read). O(t) work beside the zeroed table."""
    order = torch.argsort(tiles[:, 0] * nb + tiles[:, 1])
    rows, cols = tiles[order, 0], tiles[order, 1]
    starts = torch.cumsum(torch.bincount(rows, minlength=nb), 0) - torch.bincount(rows, minlength=nb)
    slot = torch.arange(len(rows), device=tiles.device) - starts[rows]
    table = torch.zeros(nb, nb, dtype=torch.int32, device=tiles.device)
    table[rows, slot] = cols.to(torch.int32)
    return table[None, None]


def tile_kinds(
    pattern: Pattern, n: int, block: int, device: torch.device | str, allows: IndexFn | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The tiles ``pattern`` touches at length n: ((t, 2) long (query block, key block), (t,) int8
    kind: 1 partial (some pairs allowed), 2 full (all B² pairs, inside n), 0 empty).

    A sliding window is classified from its bounds alone; any other pattern has its candidate tiles
    (``pattern.block_layout``, a superset) evaluated B² pairs each, in chunks, on ``device``. The
    work grows with the tiles the pattern touches (about n·w / B² for a window), not with n²."""
    device = torch.device(device)
    cand = pattern.block_layout(n, block).nonzero().to(device)  # (c, 2)
    q0, k0 = cand[:, 0] * block, cand[:, 1] * block
    q1, k1 = q0 + block - 1, k0 + block - 1  # each tile's last query and key
    if type(pattern) is Window:  # |i - j| within (before, after) for every pair: the corners decide
        full = (k0 >= q1 - pattern.before) & (k1 <= q0 + pattern.after) & (q1 < n) & (k1 < n)
        return cand, torch.where(full, 2, 1).to(torch.int8)
    allows = allows or _index_fn(pattern, n, device)
    count = torch.empty(len(cand), dtype=torch.int64, device=device)
    off = torch.arange(block, device=device)
    step = max(1, (1 << 24) // (block * block))
    for s in range(0, len(cand), step):
        q = (q0[s : s + step, None] + off)[:, :, None]  # (t, B, 1)
        k = (k0[s : s + step, None] + off)[:, None, :]  # (t, 1, B)
        count[s : s + step] = (allows(q.clamp(max=n - 1), k.clamp(max=n - 1)) & (q < n) & (k < n)).flatten(1).sum(-1)
    kind = torch.where(count == block * block, 2, (count > 0).to(torch.int64)).to(torch.int8)
    return cand, kind


def _index_fn(pattern: Pattern, n: int, device: torch.device | str) -> IndexFn:
    """``(q_idx, kv_idx) -> bool``: ``pattern.allows`` in a form flex's compiler lowers. Global
    tokens become a lookup table (``torch.isin`` on scalar indices does not lower), block layouts
    are computed once outside the vmap; ``|`` and ``&`` recurse; every other pattern is its own
    ``allows``."""
    if isinstance(pattern, Combined):
        a, b = _index_fn(pattern.a, n, device), _index_fn(pattern.b, n, device)
        if pattern.op == "or":
            return lambda q, k: a(q, k) | b(q, k)
        return lambda q, k: a(q, k) & b(q, k)
    if isinstance(pattern, Documents):  # the document of each position as a table (flex lowers a lookup)
        doc, last = pattern.doc_of(torch.arange(max(n, 1))).to(device), max(n, 1) - 1
        causal = pattern.causal

        def same_doc(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            dq, dk = doc[q.clamp(max=last)], doc[k.clamp(max=last)]
            ok = (dq == dk) & (dq >= 0)
            return ok & (k <= q) if causal else ok

        return same_doc
    if isinstance(pattern, GlobalTokens):
        table = torch.zeros(max(n, 1), dtype=torch.bool)
        table[pattern.indices[pattern.indices < n]] = True
        table = table.to(device)
        return lambda q, k: table[q] | table[k]
    if hasattr(pattern, "layout_for") and hasattr(pattern, "block"):  # block layouts (random, given):
        lay = pattern.layout_for(n).to(device)  # built here, outside flex's vmap (it may draw random numbers)
        nb, blk = lay.shape[0], pattern.block
        return lambda q, k: lay[(q // blk).clamp(0, nb - 1), (k // blk).clamp(0, nb - 1)] & (q < nb * blk) & (k < nb * blk)
    return lambda q, k: pattern.allows(q, k, n)


__all__ = ["FLEX_BLOCK", "IndexFn", "block_mask", "tile_kinds"]
