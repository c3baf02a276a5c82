"""Banded attention: the sliding-window fast path of ``block_sparse_attention``.

    o_i = Σ_{i−before ≤ j ≤ i+after} softmax_j(q_i·k_j · scale) v_j

Shape legend: b batch, h heads, n positions, d features, T the query tile,
nt = ⌈n/T⌉ tiles, L = T + before + after the key span of one tile.

A sliding window needs no gather: query tile t (queries tT … tT+T−1) sees the
*contiguous* key span tT − before … tT + T − 1 + after. After padding each
head's keys to nt·T rows, laying the heads end to end and adding ``before``
rows in front and ``after`` behind, these spans are the windows of one
``Tensor.unfold`` (an overlapping, copy-free view (b·h, nt, L, d) whose
backward sums the overlaps). Each span is then one "head" of a fused
``torch.nn.functional.scaled_dot_product_attention`` call (the CPU flash
kernel: online softmax, no score tensor, its own backward), with the same
(T, L) bool mask for every interior tile (0 ≤ c − r ≤ before + after) and a
per-tile mask only on the few boundary tiles, whose spans reach before 0 or
past n (into the zeros or the neighbouring head's rows, masked out). With a
key padding mask every tile gets its own mask, one batch element at a time.

Memory: O(n·L·d) for the span gradient in the backward, no n × n tensor.
Rows that may attend no key (all their keys padded out) get zero output and
zero gradients (SDPA's behaviour on fully masked rows, tested).

Reference: Beltagy et al., "Longformer", 2020, https://arxiv.org/abs/2004.05150
(the banded "sliding chunks" layout); Dao et al., "FlashAttention", 2022,
https://arxiv.org/abs/2205.14135.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Mask elements per SDPA call on the padded path (bounds the per-tile masks, ~4 MiB bool).
MASK_BUDGET = 1 << 22


def query_tile(block: int, grad: bool) -> int:
    """The query tile: ``block`` for inference, at least 256 with autograd (its backward prefers larger tiles)."""
    return max(block, 256) if grad else block


def _spans(x: torch.Tensor, nt: int, T: int, before: int, after: int) -> torch.Tensor:
    """(b, h, n, d) → (b, h, nt, L, d) overlapping key spans, a view of one padded copy."""
    b, h, n, d = x.shape
    rows = b * h * nt * T
    # one copy into [before zeros | heads end to end, each padded to nt·T | after zeros];
    # F.pad would fill the whole buffer with zeros first, then copy
    flat = x.new_empty(before + rows + after, d)
    flat[:before].zero_()
    flat[before + rows :].zero_()
    body = flat[before : before + rows].view(b, h, nt * T, d)
    body[:, :, n:].zero_()
    body[:, :, :n] = x
    L = T + before + after
    return flat.unfold(0, L, T).transpose(-1, -2).reshape(b, h, nt, L, d)


def _allowed(tiles: torch.Tensor, T: int, L: int, n: int, before: int, after: int) -> torch.Tensor:
    """(len(tiles), T, L) bool: query tT + r may attend key tT − before + c (inside [0, n))."""
    r = torch.arange(T)[:, None]
    c = torch.arange(L)[None, :]
    j = tiles[:, None, None] * T - before + c  # key position
    return (c - r >= 0) & (c - r <= before + after) & (j >= 0) & (j < n)


def band_attention(q, k, v, before: int, after: int, real: torch.Tensor | None, scale: float, T: int) -> torch.Tensor:
    """Sliding-window attention (b, h, n, d_v); ``real`` (b, n) bool, True = real key, or None."""
    b, h, n, d = q.shape
    dv = v.shape[-1]
    nt = -(-n // T)
    L = T + before + after
    qt = (q if nt * T == n else F.pad(q, (0, 0, 0, nt * T - n))).reshape(b, h, nt, T, d)
    ks, vs = _spans(k, nt, T, before, after), _spans(v, nt, T, before, after)
    sdpa = F.scaled_dot_product_attention
    if real is None:
        # interior tiles [i0, i1) share one (T, L) mask; the boundary tiles get their own
        i0 = min(nt, -(-before // T))
        i1 = max(i0, min(nt, (n - after - T) // T + 1)) if n - after - T >= 0 else i0
        segs = [(s, e) for s, e in ((0, i0), (i0, i1), (i1, nt)) if e > s]
        sizes = [e - s for s, e in segs]
        # split, not slices: its backward writes the three gradients into one tensor (slices would
        # each make a zero tensor of the full size and add them up)
        parts = (t.reshape(b * h, nt, *t.shape[-2:]).split(sizes, 1) for t in (qt, ks, vs))
        outs = []
        for (s, e), qp, kp, vp in zip(segs, *parts):
            tiles = torch.arange(s, e) if (s, e) != (i0, i1) else torch.tensor([i0])
            mask = _allowed(tiles, T, L, n, before, after).to(q.device)
            mask = mask[0] if (s, e) == (i0, i1) else mask  # (T, L) or (e − s, T, L)
            outs.append(sdpa(qp, kp, vp, attn_mask=mask, scale=scale))
        out = torch.cat(outs, 1)  # (b·h, nt, T, d_v)
    else:
        pad = F.pad(real, (before, nt * T - n + after), value=False)  # (b, before + nt·T + after)
        step = max(1, MASK_BUDGET // (T * L))
        per_b = []
        for bi in range(b):
            outs = []
            for s in range(0, nt, step):
                e = min(nt, s + step)
                tiles = torch.arange(s, e)
                mask = _allowed(tiles, T, L, n, before, after).to(q.device)
                keys = pad[bi].unfold(0, L, T)[s:e]  # (e − s, L)
                outs.append(sdpa(qt[bi, :, s:e], ks[bi, :, s:e], vs[bi, :, s:e], attn_mask=mask & keys[:, None, :], scale=scale))
            per_b.append(torch.cat(outs, 1))  # (h, nt, T, d_v)
        out = torch.stack(per_b)
    return out.reshape(b, h, nt * T, dv)[:, :, :n]


__all__ = ["band_attention", "query_tile"]
