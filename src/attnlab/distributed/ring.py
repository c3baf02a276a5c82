"""Ring attention: a sequence sharded across processes, key/value blocks passed around a ring.

Liu et al. 2023, "Ring Attention with Blockwise Transformers for Near-Infinite Context",
https://arxiv.org/abs/2310.01889; the merge is the split-KV identity of Flash-Decoding.

Each of the W ranks holds n/W queries and n/W keys/values. In W steps every rank attends
its queries to the key block it holds, then passes that block to the next rank. The
partial results over disjoint key blocks merge exactly by their row log-sum-exp ℓ:

    ℓ = log Σ_s e^{ℓ_s},     o = Σ_s e^{ℓ_s − ℓ} o_s

A block that the mask forbids entirely (future keys under ``causal``, keys outside a
window) is passed on without being computed. With the ``zigzag`` layout every rank
has the same causal work. Gradients flow back through the same ring (``comm.exchange``).

The core's non-finite rule (``attnlab.functional.attention``) holds across the ring: with a
mask, a pattern or ``causal``, NaN/±inf entries of q, k and v are zeroed before the first block
(``zero_nonfinite``; their flags travel with the keys), and after the merge the rows that may
attend a non-finite key or value, and the non-finite queries, are set to NaN
(``finish_nonfinite``): a future NaN key reaches no earlier row, forward or backward.

A pure sliding window (``patterns.sliding_window(before, after)``, ``causal`` adds
``after = 0``) on the ``contiguous`` layout needs no ring: each rank receives only
the ``before`` keys before its slice and the ``after`` keys after it from its two
neighbours (a halo), and attends once.

Shapes: q, k, v (b, h, n/W, d) on each rank; ``key_padding_mask`` (b, n/W) bool,
True = real token. Memory: the backward keeps each step's (n/W)² weights, so the
activations per rank are n²/W, not n²/W² (no recomputation yet).
"""

from __future__ import annotations

import torch

from .. import patterns as P
from ..functional.attention import attention, finish_nonfinite, zero_nonfinite
from ..functional.scores import default_scale
from ..kernels import attention_lse, block_sparse_attention, flash
from ..kernels.partial import PartialResult, finish_partial, merge, no_keys
from .comm import exchange, ring_shift, tie
from .layout import check_shards, empty_result, positions, world


def _allowed(q_pos: torch.Tensor, k_pos: torch.Tensor, n: int, pattern, causal: bool) -> torch.Tensor | None:
    """(n_q, n_k) bool from global positions (True = may attend), or None when all pairs may."""
    allow = None
    if pattern is not None:
        allow = pattern.allows(q_pos[:, None], k_pos[None, :], n)
    if causal:
        c = k_pos[None, :] <= q_pos[:, None]
        allow = c if allow is None else allow & c
    return allow


def _mask(allow: torch.Tensor | None, pad: torch.Tensor | None, device) -> torch.Tensor | None:
    """The block's bool mask (b or 1, 1, n_q, n_k) from the pair mask and the keys' padding."""
    m = None if allow is None else allow.to(device)[None, None]
    if pad is not None:
        p = pad[:, None, None, :]
        m = p if m is None else m & p
    return m


def _fused(q, k, v, *, bias=None, causal=False, scale):
    """PyTorch's fused CPU flash kernel → (out, ℓ); no autograd."""
    return flash.FLASH(q, k, v, 0.0, causal, attn_mask=bias, scale=scale)[:2]


def _runs(pos: torch.Tensor) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive positions: (local start, length, first global position)."""
    cut = [0] + [i for i in range(1, len(pos)) if int(pos[i]) != int(pos[i - 1]) + 1] + [len(pos)]
    return [(a, b - a, int(pos[a])) for a, b in zip(cut[:-1], cut[1:])]


def _causal_fused(q, k, v, q_pos, k_pos, pad, scale):
    """Causal (out, ℓ) of one block without a dense mask: its query and key runs are compared as
    ranges — keys wholly before a query run need no mask, the same range is ``is_causal``, keys
    wholly after it are skipped — so memory stays O(n) as in one process (no autograd)."""
    bias = None if pad is None else flash.additive(pad[:, None, None, :], q.dtype)  # (b, 1, 1, n_k)
    outs, lses = [], []
    for qi, ql, qp in _runs(q_pos):
        parts: list[PartialResult] = []
        for ki, kl, kp in _runs(k_pos):
            if kp > qp + ql - 1:
                continue  # every key after every query
            qq, kk, vv = q[..., qi : qi + ql, :], k[..., ki : ki + kl, :], v[..., ki : ki + kl, :]
            b = None if bias is None else bias[..., ki : ki + kl]
            if kp + kl - 1 <= qp:  # every key at or before every query
                # a sequence whose keys here are all padding: no key (ℓ = −inf)
                dead = None if pad is None else ~pad[:, ki : ki + kl].any(-1)[:, None, None]  # (b, 1, 1)
                parts.append(finish_partial(*_fused(qq, kk, vv, bias=b, scale=scale), dead))
            elif kp == qp and kl == ql and b is None:
                parts.append(PartialResult(*_fused(qq, kk, vv, causal=True, scale=scale)))
            else:  # a partial overlap (or padding on the diagonal): the dense mask of this pair only
                allow = k_pos[ki : ki + kl][None, :] <= q_pos[qi : qi + ql][:, None]
                m = allow[None, None] if pad is None else allow[None, None] & pad[:, None, None, ki : ki + kl]
                o, lse = _fused(qq, kk, vv, bias=flash.additive(m.expand(q.shape[0], 1, ql, kl), q.dtype), scale=scale)
                parts.append(finish_partial(o, lse, ~m.any(-1)))
        o, lse = merge(parts, inplace=True) if parts else no_keys(q, (*q.shape[:-2], ql, v.shape[-1]))
        outs.append(o), lses.append(lse)
    return torch.cat(outs, -2), torch.cat(lses, -1)


def _reach(bad: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor, allow: torch.Tensor | None,
           causal: bool) -> torch.Tensor:
    """(b, h, n_q) bool: the rows that may attend a key or value of this block holding NaN or inf.

    bad (b, h, n_k) bool (padding excluded); ``allow`` (n_q, n_k) or None: under ``causal`` alone the
    rows at or after the block's first bad key (no (n/W)² mask), without a mask every row."""
    if allow is not None:
        return (bad.to(torch.float32) @ allow.T.to(bad.device, torch.float32)) > 0
    if causal:
        never = torch.iinfo(torch.long).max
        first = torch.where(bad, k_pos.to(bad.device), never).amin(-1, keepdim=True)  # (b, h, 1)
        return q_pos.to(bad.device) >= first
    return bad.any(-1, keepdim=True).expand(*bad.shape[:-1], q_pos.numel())


def _partial(q, k, v, mask, scale) -> PartialResult:
    """(out, ℓ) of one block. Without autograd on CPU, PyTorch's fused flash kernel gives both in
    O(n) memory; otherwise the core's attention and the block's ℓ (differentiable, O(n_q·n_k))."""
    if _fusable(q, k, v):
        bias = None if mask is None else flash.additive(mask.expand(q.shape[0], 1, q.shape[-2], k.shape[-2]), q.dtype)
        # (b, 1, n_q): a row with no key in this block (the kernel reports ℓ = 0 for it)
        return finish_partial(*_fused(q, k, v, bias=bias, scale=scale), None if mask is None else ~mask.any(-1))
    return attention_lse(q, k, v, mask, scale=scale)  # the core's output and its ℓ, differentiable


def _fusable(q, k, v) -> bool:
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return flash.HAS_FUSED and q.device.type == "cpu" and not needs_grad


def _edge(t: torch.Tensor, which: slice) -> torch.Tensor:
    """Positions ``which`` of a (b, h, n, d) key/value block or of a (b, n) padding mask."""
    return t[..., which, :] if t.dim() == 4 else t[..., which]


def _halo(q, k, v, pad, win: P.Window, n: int, scale: float, group) -> torch.Tensor:
    """A sliding window on the contiguous layout: only the neighbours' edge keys are exchanged."""
    rank, size = world(group)
    c = q.shape[-2]
    mine = [k, v] + ([pad] if pad is not None else [])
    lo_from = rank - 1 if rank > 0 and win.before else None  # the keys just before my slice
    hi_from = rank + 1 if rank + 1 < size and win.after else None  # the keys just after it
    sends, recvs = [], []
    if rank + 1 < size and win.before:  # my last `before` keys are the next rank's halo
        sends += [(_edge(t, slice(c - win.before, c)), rank + 1) for t in mine]
    if rank > 0 and win.after:  # my first `after` keys are the previous rank's
        sends += [(_edge(t, slice(0, win.after)), rank - 1) for t in mine]
    if lo_from is not None:
        recvs += [(_edge(t, slice(c - win.before, c)).shape, lo_from) for t in mine]
    if hi_from is not None:
        recvs += [(_edge(t, slice(0, win.after)).shape, hi_from) for t in mine]
    got, token = exchange(sends, recvs, k, group)
    m = len(mine)
    lo = got[:m] if lo_from is not None else None
    hi = got[-m:] if hi_from is not None else None
    start = rank * c
    blocks = [x for x in (lo, mine, hi) if x is not None]
    k_all = torch.cat([b[0] for b in blocks], -2)
    v_all = torch.cat([b[1] for b in blocks], -2)
    p_all = None if pad is None else torch.cat([b[2] > 0.5 if b is not mine else b[2] for b in blocks], -1)
    k_pos = torch.arange(start - (win.before if lo is not None else 0), start + c + (win.after if hi is not None else 0))
    if q.device.type == "cpu":  # the block-sparse kernel: O(c·w), on queries padded to the keys' span
        lo_n, hi_n = int(start - k_pos[0]), int(k_pos[-1] + 1 - start - c)
        zeros = q.new_zeros
        q_ext = torch.cat([zeros(*q.shape[:-2], lo_n, q.shape[-1]), q, zeros(*q.shape[:-2], hi_n, q.shape[-1])], -2)
        out, _ = block_sparse_attention(q_ext, k_all, v_all, P.sliding_window(win.before, win.after),
                                        key_padding_mask=p_all, scale=scale)
        return tie(out[..., lo_n : lo_n + c, :], [token])
    allow = win.allows(torch.arange(start, start + c)[:, None], k_pos[None, :], n)
    out, _ = attention(q, k_all, v_all, mask=_mask(allow, p_all, q.device), scale=scale)
    return tie(out, [token])


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    pattern: P.Pattern | None = None,
    key_padding_mask: torch.Tensor | None = None,
    scale: float | None = None,
    group=None,
    layout: str = "contiguous",
) -> torch.Tensor:
    """Attention of this rank's queries over the whole sharded sequence; → out (b, h, n/W, d_v)."""
    scale = check_shards(q, k, v, key_padding_mask, scale, pattern, layout)
    rank, size = world(group)
    if (empty := empty_result(q, k, v)) is not None:  # empty shards: nothing to pass around
        return empty
    c = q.shape[-2]
    n = c * size
    s = default_scale(q.shape[-1]) if scale is None else scale
    pad = key_padding_mask
    if pad is not None:  # padded keys are zeroed, so no NaN or inf reaches a product or a gradient
        keep = pad[:, None, :, None]
        k, v = torch.where(keep, k, torch.zeros_like(k)), torch.where(keep, v, torch.zeros_like(v))
    if isinstance(pattern, P.Window) and layout == "contiguous":
        win = P.Window(pattern.before, 0) if causal else pattern
        if win.before <= c and win.after <= c:
            return _halo(q, k, v, pad, win, n, s, group)
    bad_q = bad = hit = None
    if causal or pattern is not None or pad is not None:  # the core's non-finite rule, across the ring
        q, k, v, bad_q, bad = zero_nonfinite(q, k, v)  # (b, h, n/W) each
        bad = bad if pad is None else bad & pad[:, None, :]  # (padded keys are masked anyway)
    q_pos = positions(n, size, rank, layout)
    parts: list[PartialResult] = []
    tokens = []
    cur = [k, v] + ([pad] if pad is not None else []) + ([bad] if bad is not None else [])
    for step in range(size):
        src = (rank - step) % size  # the rank whose keys this rank holds now
        k_pos = positions(n, size, src, layout)
        kpad = cur[2] > 0.5 if pad is not None else None
        allow = None
        if causal and pattern is None and _fusable(q, cur[0], cur[1]):  # no (n/W)² mask is ever built
            if int(k_pos.min()) <= int(q_pos.max()):  # some key at or before some query
                parts.append(PartialResult(*_causal_fused(q, cur[0], cur[1], q_pos, k_pos, kpad, s)))
        else:
            allow = _allowed(q_pos, k_pos, n, pattern, causal)
            if allow is None or bool(allow.any()):  # positions live on the host: no device sync
                parts.append(_partial(q, cur[0], cur[1], _mask(allow, kpad, q.device), s))
        if bad is not None:
            reach = _reach(cur[-1] > 0.5, q_pos, k_pos, allow, causal)
            hit = reach if hit is None else hit | reach
        if step + 1 < size:
            cur, token = ring_shift(cur, k, group)
            tokens.append(token)
    if not parts:  # every key is masked for every query of this rank
        return tie(torch.zeros(*q.shape[:-1], v.shape[-1], dtype=v.dtype, device=v.device), tokens)
    out, lse = merge(parts)
    if hit is not None and bad_q is not None:  # NaN rows: those that may attend a non-finite key or value,
        out = finish_nonfinite(out, hit | (bad_q & (lse > float("-inf"))), None)  # and live non-finite queries
    return tie(out, tokens)


__all__ = ["ring_attention"]
