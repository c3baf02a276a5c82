"""Banded attention: the sliding-window fast path of ``block_sparse_attention``.

    o_i = Σ_{i−before ≤ j ≤ i+after} softmax_j(q_i·k_j · scale) v_j

Shape legend: b batch, h heads, n positions, d features, T the query tile,
nt = ⌈n/T⌉ tiles, L = T + before + after the key span of one tile.

A sliding window needs no gather: query tile t (queries tT … tT+T−1) sees the
*contiguous* key span tT − before … tT + T − 1 + after. Each span is one "head"
of a call of PyTorch's fused CPU flash kernel (online softmax, no score tensor,
its own backward), with the same (T, L) mask for every interior tile
(0 ≤ c − r ≤ before + after) and a per-tile mask only on the few boundary tiles.

* ``band_forward`` / ``band_backward`` (the fused path of ``block_sparse_attention``):
  the spans of interior tiles are a strided view of k and v (``as_strided``, no
  copy); the spans of boundary tiles, which reach before 0 or past n, are
  gathered with zeros outside. They return and take the row log-sum-exp, so a
  window can be merged with other parts of a pattern (``attnlab.kernels.partial``);
  the backward adds each span's key gradients back with ``index_add_``, a few
  tiles per call so the kernel's own gradient buffers stay small.

Where a torch build lacks the private kernel, ``block_sparse_attention`` takes its explicit
tile path (``tiles.tiles_forward``) for a window too.

With a key padding mask every tile gets its own mask, one batch element at a time.

Memory: O(n·L·d) for the span gradient in the backward, no n × n tensor.
Rows that may attend no key (all their keys padded out) get zero output and
zero gradients (SDPA's behaviour on fully masked rows, tested).

Reference: Beltagy et al., "Longformer", 2020, https://arxiv.org/abs/2004.05150
(the banded "sliding chunks" layout); Dao et al., "FlashAttention", 2022,
https://arxiv.org/abs/2205.14135.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from . import flash
from .partial import PartialResult, finish_partial

# Mask elements per SDPA call on the padded path (bounds the per-tile masks, ~4 MiB bool).
MASK_BUDGET = 1 << 22
# Key-span elements per backward kernel call (~8 MiB fp32).
SPAN_BUDGET = 1 << 21


def query_tile(block: int, grad: bool) -> int:
    """The query tile: ``block`` for inference, at least 256 with autograd (its backward prefers larger tiles)."""
    return max(block, 256) if grad else block


def _allowed(tiles: torch.Tensor, T: int, L: int, n: int, before: int, after: int) -> torch.Tensor:
    """(len(tiles), T, L) bool: query tT + r may attend key tT − before + c (inside [0, n))."""
    r = torch.arange(T)[:, None]
    c = torch.arange(L)[None, :]
    j = tiles[:, None, None] * T - before + c  # key position
    return (c - r >= 0) & (c - r <= before + after) & (j >= 0) & (j < n)


def _segments(n: int, nt: int, T: int, before: int, after: int) -> list[tuple[int, int, torch.Tensor]]:
    """[(first tile, end tile, allowed)] covering tiles [0, nt): the interior tiles share one (T, L)
    mask; the boundary tiles, whose spans reach before 0 or past n, get their own (e − s, T, L)."""
    L = T + before + after
    i0 = min(nt, -(-before // T))
    i1 = max(i0, min(nt, (n - after - T) // T + 1)) if n - after - T >= 0 else i0
    out = []
    for s, e in ((0, i0), (i0, i1), (i1, nt)):
        if e > s:
            interior = (s, e) == (i0, i1)
            allow = _allowed(torch.arange(s, e) if not interior else torch.tensor([i0]), T, L, n, before, after)
            out.append((s, e, allow[0] if interior else allow))
    return out


def _calls(
    n: int,
    nt: int,
    T: int,
    before: int,
    after: int,
    real: torch.Tensor | None,
    b: int,
    h: int,
    d: int,
    device: torch.device,
    budget: int | None = None,
) -> Iterator[tuple[int | None, int, int, torch.Tensor, torch.Tensor | None]]:
    """The fused kernel's calls of one band: (batch element or None for all, first tile, end tile,
    allowed (T, L) or (e − s, T, L) bool, rows with no key (e − s, T) or None).

    With ``budget`` a call covers at most that many span elements: the backward kernel allocates
    and zeroes a key and a value gradient per span, and small ones are reused instead of being
    page-faulted in at the size of all spans."""
    L = T + before + after
    tiles = nt if budget is None else max(1, budget // ((1 if real is not None else b) * h * L * d))
    if real is None:
        for s, e, allow in _segments(n, nt, T, before, after):
            allow = allow.to(device)
            for c in range(s, e, tiles):
                yield None, c, min(e, c + tiles), allow if allow.dim() == 2 else allow[c - s : c + tiles - s], None
        return
    pad = F.pad(real, (before, nt * T - n + after), value=False)  # (b, before + nt·T + after)
    step = max(1, min(tiles, MASK_BUDGET // (T * L)))
    for bi in range(b):
        for s in range(0, nt, step):
            e = min(nt, s + step)
            allow = _allowed(torch.arange(s, e), T, L, n, before, after).to(device) & pad[bi].unfold(0, L, T)[s:e, None, :]
            yield bi, s, e, allow, ~allow.any(-1)  # rows with no key (a tensor: no host read)


def _kernel_mask(allow: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(T, L) or (e − s, T, L) bool → the fused kernel's additive mask, 2-D or 4-D (1, e − s, T, L)."""
    bias = flash.additive(allow, dtype)
    return bias if bias.dim() == 2 else bias[None]


def _query_tiles(x: torch.Tensor, nt: int, T: int) -> torch.Tensor:
    """(b, h, n, d) → (b, h, nt, T, d), zero-padded (a view when n = nt·T)."""
    b, h, n, d = x.shape
    return (x if nt * T == n else F.pad(x, (0, 0, 0, nt * T - n))).reshape(b, h, nt, T, d)


def _span_positions(s: int, e: int, T: int, before: int, after: int) -> torch.Tensor:
    """(e − s, L) key positions of the spans of tiles [s, e): tile t covers tT − before … tT + T − 1 + after."""
    return torch.arange(s, e)[:, None] * T - before + torch.arange(T + before + after)[None, :]


def _chunk_spans(x: torch.Tensor, s: int, e: int, T: int, before: int, after: int) -> torch.Tensor:
    """The key (or value) spans of tiles [s, e) for every head: (b·h, e − s, L, d).

    Interior tiles (spans inside [0, n)) are a strided view of x, no copy; a chunk that reaches
    before 0 or past n is gathered, with zeros outside (those keys are masked)."""
    b, h, n, d = x.shape
    L = T + before + after
    if s * T >= before and e * T + after <= n and x.is_contiguous():
        return x.as_strided((b * h, e - s, L, d), (n * d, T * d, d, 1), x.storage_offset() + (s * T - before) * d)
    pos = _span_positions(s, e, T, before, after).to(x.device)
    ok = (pos >= 0) & (pos < n)
    return x.reshape(b * h, n, d)[:, pos.clamp(0, n - 1)].masked_fill_(~ok[None, :, :, None], 0.0)


def band_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    before: int,
    after: int,
    real: torch.Tensor | None,
    scale: float,
    T: int,
) -> PartialResult:
    """The window with PyTorch's fused kernel, no autograd: (out (b, h, n, d_v), lse (b, h, n)).

    Rows that may attend no key get out = 0 and lse = −inf (``attnlab.kernels.partial``)."""
    b, h, n, d = q.shape
    dv = v.shape[-1]
    nt = -(-n // T)
    qt, k, v = _query_tiles(q, nt, T), k.contiguous(), v.contiguous()  # once: the spans are views of k and v
    out, lse = q.new_empty(b, h, nt, T, dv), None
    for bi, s, e, allow, dead in _calls(n, nt, T, before, after, real, b, h, max(d, v.shape[-1]), q.device):
        sel = slice(None) if bi is None else slice(bi, bi + 1)
        m = qt.shape[0] if bi is None else 1
        o, lp = flash.FLASH(
            qt[sel, :, s:e].reshape(m * h, e - s, T, d), _chunk_spans(k[sel], s, e, T, before, after),
            _chunk_spans(v[sel], s, e, T, before, after), 0.0, False, attn_mask=_kernel_mask(allow, q.dtype), scale=scale,
        )  # (m·h, e − s, T, d_v), (m·h, e − s, T)
        o, lp = finish_partial(o, lp, None if dead is None else dead[None])
        if lse is None:
            lse = lp.new_empty(b, h, nt, T)
        out[sel, :, s:e] = o.view(m, h, e - s, T, dv)
        lse[sel, :, s:e] = lp.reshape(m, h, e - s, T)
    assert lse is not None  # n >= 1: there was a call
    return PartialResult(out.view(b, h, nt * T, dv)[:, :, :n], lse.view(b, h, nt * T)[:, :, :n])


def band_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    before: int,
    after: int,
    real: torch.Tensor | None,
    scale: float,
    T: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of the window part, given the output and lse of the *whole* softmax
    (this part alone, or merged with others); rows with no key must come with dout = 0 and a finite lse."""
    b, h, n, d = q.shape
    dv_ = v.shape[-1]
    nt = -(-n // T)
    qt, dot, ot = _query_tiles(q, nt, T), _query_tiles(dout, nt, T), _query_tiles(out, nt, T)
    k, v = k.contiguous(), v.contiguous()  # once: the spans are views of k and v
    lt = _query_tiles(lse[..., None], nt, T)[..., 0]  # (b, h, nt, T)
    dq = q.new_empty(b, h, nt, T, d)
    scratch = b * h * n  # one extra row takes the (zero) gradients of span rows outside [0, n)
    dk_flat, dv_flat = k.new_zeros(scratch + 1, d), v.new_zeros(scratch + 1, dv_)
    for bi, s, e, allow, _ in _calls(n, nt, T, before, after, real, b, h, max(d, dv_), q.device, SPAN_BUDGET):
        sel = slice(None) if bi is None else slice(bi, bi + 1)
        m = qt.shape[0] if bi is None else 1
        gq, gk, gv = flash.FLASH_BWD(
            dot[sel, :, s:e].reshape(m * h, e - s, T, dv_), qt[sel, :, s:e].reshape(m * h, e - s, T, d),
            _chunk_spans(k[sel], s, e, T, before, after), _chunk_spans(v[sel], s, e, T, before, after),
            ot[sel, :, s:e].reshape(m * h, e - s, T, dv_), lt[sel, :, s:e].reshape(m * h, e - s, T), 0.0, False,
            attn_mask=_kernel_mask(allow, q.dtype), scale=scale,
        )
        dq[sel, :, s:e] = gq.view(m, h, e - s, T, d)
        # the kernel's key gradients are laid out (m·h, L, e − s, d) in memory: index them that way (no copy)
        pos = _span_positions(s, e, T, before, after).T.to(q.device)  # (L, e − s)
        heads = (torch.arange(m * h, device=q.device) + (0 if bi is None else bi * h))[:, None, None]
        idx = torch.where((pos >= 0) & (pos < n), heads * n + pos, scratch).flatten()
        dk_flat.index_add_(0, idx, gk.transpose(1, 2).reshape(-1, d))
        dv_flat.index_add_(0, idx, gv.transpose(1, 2).reshape(-1, dv_))
    dk, dv = dk_flat[:scratch].view(b, h, n, d), dv_flat[:scratch].view(b, h, n, dv_)
    return dq.view(b, h, nt * T, d)[:, :, :n], dk, dv


__all__ = ["band_forward", "band_backward", "query_tile"]
