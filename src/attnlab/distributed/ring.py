"""Ring attention: a sequence sharded across processes, key/value blocks passed around a ring.

Liu et al. 2023, "Ring Attention with Blockwise Transformers for Near-Infinite Context",
https://arxiv.org/abs/2310.01889; the merge is the split-KV identity of Flash-Decoding.

Each of the W ranks holds n/W queries and n/W keys/values. In W steps every rank attends
its queries to the key block it holds, then passes that block to the next rank. The
partial results over disjoint key blocks merge exactly by their row log-sum-exp ℓ:

    ℓ = log Σ_s e^{ℓ_s},     o = Σ_s e^{ℓ_s − ℓ} o_s

A block that the mask forbids entirely (future keys under ``causal``, keys outside a
window) is passed on without being computed. With the ``zigzag`` layout every rank
has the same causal work.

The ring is one autograd function (FlashAttention's recomputation, Dao et al. 2022; the zigzag
ring of ring-flash-attention, https://github.com/zhuzilin/ring-flash-attention): the forward keeps only the running (o, ℓ) of its queries and saves
q, k, v, o and ℓ; the backward passes the key/value blocks round again, each with its gradient
accumulators dK, dV, recomputes each block's weights from the saved ℓ,

    P = exp(S − ℓ),   dS = P ∘ (dO Vᵀ − rowsum(dO ∘ O)),   dQ += dS K·scale,   dK += dSᵀ Q·scale,   dV += Pᵀ dO

(PyTorch's fused CPU flash backward, or these products written out on other devices), and after
the last step sends the accumulators home. Blocks travel in place (``comm.rotate_``).

The core's non-finite rule (``attnlab.functional.attention``) holds across the ring: with a
mask, a pattern or ``causal``, NaN/±inf entries of q, k and v are zeroed before the first block
(``_clean``; their flags travel with the keys; on the host, finite inputs are not copied), and after the merge the rows that may
attend a non-finite key or value, and the non-finite queries, are set to NaN
(``finish_nonfinite``): a future NaN key reaches no earlier row, forward or backward.

A pure sliding window (``patterns.sliding_window(before, after)``, ``causal`` adds
``after = 0``) on the ``contiguous`` layout needs no ring: each rank receives only
the ``before`` keys before its slice and the ``after`` keys after it from its two
neighbours (a halo), and attends once.

Shapes: q, k, v (b, h, n/W, d) on each rank; ``mask`` bool (b, n/W), True = may attend
(a real key). Memory per rank: O(n/W · d) kept for the backward (never a block's (n/W)²
weights); under ``causal`` alone each kernel call covers at most ``TILE`` × ``TILE`` positions. A
pattern other than the halo's window builds each block's (n/W)² bool mask while it runs (not kept).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import patterns as P
from ..functional.attention import attention
from ..functional.nonfinite import (
    finish_nonfinite,
    host_checks,
    nonfinite_rows,
    zero_nonfinite_entries,
)
from ..functional.scores import default_scale
from ..kernels import attention_lse, block_sparse_attention, flash
from ..kernels.partial import PartialResult, finish_partial, merge_rows
from .call import ShardedCall, context_parallel
from .comm import exchange, rotate_, tie
from .layout import empty_result, positions, world


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


class _Call(NamedTuple):
    """One kernel call of a block: query rows × key columns (local slices), the bool mask of that pair
    (broadcastable to (b, 1, rows, cols), True = may attend; None: every pair) or the kernel's own
    ``causal`` mask (the same range of positions)."""

    rows: slice
    cols: slice
    mask: torch.Tensor | None
    causal: bool


TILE = 1024  # causal calls cover at most TILE × TILE positions: the kernels' per-call buffers stay small


def _runs(pos: torch.Tensor, tile: int) -> list[tuple[int, int, int]]:
    """Runs of consecutive positions, cut at every global multiple of ``tile`` (so that query and key
    runs line up): (local start, length, first global position)."""
    cut = [0] + [i for i in range(1, len(pos)) if int(pos[i]) != int(pos[i - 1]) + 1] + [len(pos)]
    runs = []
    for a, b in zip(cut[:-1], cut[1:]):
        while a < b:
            end = min(b, a + tile - int(pos[a]) % tile)
            runs.append((a, end - a, int(pos[a])))
            a = end
    return runs


def _causal_calls(q_pos: torch.Tensor, k_pos: torch.Tensor, kpad: torch.Tensor | None, device) -> list[_Call]:
    """Causal calls of one block without a dense mask: its query and key runs (at most ``TILE`` long) are
    compared as ranges — keys wholly before a query run need no mask (padding aside), the same range
    is the kernel's ``causal``, keys wholly after it are skipped — so memory stays O(n) as in one process."""
    calls = []
    for qi, ql, qp in _runs(q_pos, TILE):
        for ki, kl, kp in _runs(k_pos, TILE):
            if kp > qp + ql - 1:
                continue  # every key after every query
            rows, cols = slice(qi, qi + ql), slice(ki, ki + kl)
            p = None if kpad is None else kpad[:, None, None, cols]  # (b, 1, 1, kl)
            if kp + kl - 1 <= qp:  # every key at or before every query
                calls.append(_Call(rows, cols, p, False))
            elif kp == qp and kl == ql and p is None:
                calls.append(_Call(rows, cols, None, True))
            else:  # a partial overlap (or padding on the diagonal): the dense mask of this pair only
                allow = (k_pos[cols][None, :] <= q_pos[rows][:, None]).to(device)[None, None]
                calls.append(_Call(rows, cols, allow if p is None else allow & p, False))
    return calls


def _calls(q_pos, k_pos, kpad, n: int, pattern, causal: bool, device) -> tuple[list[_Call], torch.Tensor | None]:
    """The kernel calls of one block (none when the mask forbids it entirely) → (calls, pair mask for
    ``_reach``: (n_q, n_k) bool, or None under ``causal`` alone or without any mask)."""
    if causal and pattern is None:
        return _causal_calls(q_pos, k_pos, kpad, device), None
    allow = _allowed(q_pos, k_pos, n, pattern, causal)
    if allow is not None and not bool(allow.any()):  # positions live on the host: no device sync
        return [], allow
    return [_Call(slice(None), slice(None), _mask(allow, kpad, device), False)], allow


def _clean(q, k, v, pad):
    """The first half of the core's non-finite rule → (q, k, v with NaN/±inf zeroed, ``bad_q`` (b, h, n/W)
    the queries that held one, ``bad`` (b, h, n/W) the real keys/values that did); on the host, when
    every entry is finite, the inputs themselves (no copies; ``nonfinite.host_checks``). The flags are
    always made: every rank sends its keys' flags round the ring, whatever it holds."""
    bad_q, bad = nonfinite_rows(q), nonfinite_rows(k) | nonfinite_rows(v)
    bad = bad if pad is None else bad & pad[:, None, :]  # (padded keys are masked anyway)
    if host_checks(q) and not bool(bad_q.any() | bad.any()):
        return q, k, v, bad_q, bad
    return zero_nonfinite_entries(q), zero_nonfinite_entries(k), zero_nonfinite_entries(v), bad_q, bad


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


def _fused_ok(q: torch.Tensor) -> bool:
    """PyTorch's fused flash kernel runs the ring's blocks (on the CPU); elsewhere the core's attention."""
    return flash.HAS_FUSED and q.device.type == "cpu"


def _window_kernel_ok(q: torch.Tensor) -> bool:
    """attnlab's block-sparse CPU kernel runs the window's halo; elsewhere the core's attention."""
    return q.device.type == "cpu"


def _bias(call: _Call, b: int, dtype) -> torch.Tensor | None:
    """The fused kernel's additive mask of a call (b, 1, rows or 1, cols), or None."""
    return None if call.mask is None else flash.additive(call.mask.expand(b, 1, -1, -1), dtype)


def _dense(call: _Call, n_q: int, n_k: int, device) -> torch.Tensor | None:
    """A call's bool mask with its ``causal`` written out (the explicit path)."""
    if call.causal:
        return torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()[None, None]
    return call.mask


def _block_forward(q, k, v, call: _Call, scale: float) -> PartialResult:
    """(out, ℓ) of one call, no autograd: PyTorch's fused CPU flash kernel (O(n) memory), else the
    core's attention and ℓ (``attention_lse``)."""
    q, k, v = q[..., call.rows, :], k[..., call.cols, :], v[..., call.cols, :]
    if _fused_ok(q):
        out, lse = flash.FLASH(q, k, v, 0.0, call.causal, attn_mask=_bias(call, q.shape[0], q.dtype), scale=scale)[:2]
        # rows with no key in this call (the kernel reports ℓ = 0 for them)
        return finish_partial(out, lse, None if call.mask is None else ~call.mask.any(-1))
    return attention_lse(q, k, v, _dense(call, q.shape[-2], k.shape[-2], q.device), scale=scale)


def _block_backward(dout, q, k, v, out, lse, call: _Call, scale: float):
    """(dq, dk, dv) of one call from the *merged* output and ℓ (FlashAttention's backward: the weights
    P = exp(S − ℓ) are recomputed, dS = P ∘ (dP − rowsum(dO ∘ O))); rows with no key at all come with
    dO = 0 and a finite ℓ."""
    r, c = call.rows, call.cols
    dout, q, out, lse = dout[..., r, :], q[..., r, :], out[..., r, :], lse[..., r]
    k, v = k[..., c, :], v[..., c, :]
    if _fused_ok(q):
        return flash.FLASH_BWD(dout, q, k, v, out, lse, 0.0, call.causal,
                               attn_mask=_bias(call, q.shape[0], q.dtype), scale=scale)
    s = (q @ k.transpose(-1, -2)) * scale
    mask = _dense(call, q.shape[-2], k.shape[-2], q.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - lse[..., None].to(s.dtype))  # (b, h, rows, cols); 0 where masked
    ds = p * (dout @ v.transpose(-1, -2) - (dout * out).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(-1, -2) @ q) * scale, p.transpose(-1, -2) @ dout


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
    if _window_kernel_ok(q):  # the block-sparse kernel: O(c·w), on queries padded to the keys' span
        lo_n, hi_n = int(start - k_pos[0]), int(k_pos[-1] + 1 - start - c)
        zeros = q.new_zeros
        q_ext = torch.cat([zeros(*q.shape[:-2], lo_n, q.shape[-1]), q, zeros(*q.shape[:-2], hi_n, q.shape[-1])], -2)
        out, _ = block_sparse_attention(q_ext, k_all, v_all, P.sliding_window(win.before, win.after),
                                        mask=p_all, scale=scale)
        return tie(out[..., lo_n : lo_n + c, :], [token])
    allow = win.allows(torch.arange(start, start + c)[:, None], k_pos[None, :], n)
    out, _ = attention(q, k_all, v_all, mask=_mask(allow, p_all, q.device), scale=scale)
    return tie(out, [token])


@context_parallel
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: ShardedCall) -> torch.Tensor:
    """Attention of this rank's queries over the whole sharded sequence, the key/value blocks passed
    round a ring (see the module docstring); → out (b, h, n/W, d_v), this rank's shard.

    ``ring_attention(q, k, v, *, causal=False, pattern=None, mask=None, scale=None, group=None,
    layout="contiguous")``: the options of ``distributed.call.ShardedCall``.
    """
    scale = call.check(q, k, v)
    causal, pattern, mask, group, layout = call.causal, call.pattern, call.mask, call.group, call.layout
    rank, size = world(group)
    if (empty := empty_result(q, k, v)) is not None:  # empty shards: nothing to pass around
        return empty
    c = q.shape[-2]
    n = c * size
    s = default_scale(q.shape[-1]) if scale is None else scale
    pad = mask
    if pad is not None:  # padded keys are zeroed, so no NaN or inf reaches a product or a gradient
        keep = pad[:, None, :, None]
        k, v = torch.where(keep, k, torch.zeros_like(k)), torch.where(keep, v, torch.zeros_like(v))
    if isinstance(pattern, P.Window) and layout == "contiguous":
        win = P.Window(pattern.before, 0) if causal else pattern
        if win.before <= c and win.after <= c:
            return _halo(q, k, v, pad, win, n, s, group)
    bad_q = bad = None
    if causal or pattern is not None or pad is not None:  # the core's non-finite rule, across the ring
        q, k, v, bad_q, bad = _clean(q, k, v, pad)
    ring = _Ring(n, size, rank, layout, pattern, causal, s, group)
    out, lse, hit = _RingAttention.apply(q, k, v, pad, bad, ring)
    if bad is not None and bad_q is not None:  # NaN rows: those that may attend a non-finite key or value,
        nan_rows = hit | (bad_q & (lse > float("-inf")))  # and live non-finite queries
        if not host_checks(out) or bool(nan_rows.any()):  # (on the host: no copy of out when there are none)
            out = finish_nonfinite(out, nan_rows, None)
    return out


class _Ring(NamedTuple):
    """What every step of the ring needs besides the tensors."""

    n: int
    size: int
    rank: int
    layout: str
    pattern: P.Pattern | None
    causal: bool
    scale: float
    group: object

    def steps(self):
        """(step, the global positions of the keys this rank holds at that step), around the ring."""
        for step in range(self.size):
            yield step, positions(self.n, self.size, (self.rank - step) % self.size, self.layout)

    def shift_(self, tensors: list[torch.Tensor]) -> None:
        """Each tensor (contiguous, this rank's working copy) becomes the previous rank's, in place
        (a ring of one process has nothing to pass: its backward needs no group any more)."""
        if self.size > 1:
            rotate_(tensors, self.group)


def _travelling(k: torch.Tensor, *more: torch.Tensor | None) -> list[torch.Tensor]:
    """Contiguous working copies, in k's dtype, of what goes round the ring (flags as 0/1; None left out)."""
    return [t.to(k.dtype).clone(memory_format=torch.contiguous_format) for t in (k, *more) if t is not None]


def _ring_forward(q, k, v, pad, bad, ring: _Ring) -> tuple[PartialResult, torch.Tensor]:
    """The merged (out, ℓ) of this rank's queries over every key block, and the rows (b, h, n/W) that may
    attend a non-finite key or value (``bad``; all False without it). No autograd: only the running
    (out, ℓ) is kept, O(n/W · d)."""
    q_pos = positions(ring.n, ring.size, ring.rank, ring.layout)
    acc = PartialResult(v.new_zeros(*q.shape[:-1], v.shape[-1]),
                        q.new_full(q.shape[:-1], float("-inf"), dtype=torch.promote_types(q.dtype, torch.float32)))
    hit = torch.zeros(q.shape[:-1], dtype=torch.bool, device=q.device)
    cur = _travelling(k, v, pad, bad)
    for step, k_pos in ring.steps():
        kpad = cur[2] > 0.5 if pad is not None else None
        calls, allow = _calls(q_pos, k_pos, kpad, ring.n, ring.pattern, ring.causal, q.device)
        for call in calls:
            part = _block_forward(q, cur[0], cur[1], call, ring.scale)
            rows = torch.arange(q.shape[-2])[call.rows].to(q.device)
            acc = merge_rows(acc, PartialResult(part.out, part.lse.to(acc.lse.dtype)), rows)
        if bad is not None:
            hit |= _reach(cur[-1] > 0.5, q_pos, k_pos, allow, ring.causal)
        if step + 1 < ring.size:
            ring.shift_(cur)
    return acc, hit


def _ring_backward(dout, q, k, v, out, lse, pad, ring: _Ring):
    """(dq, dk, dv): the key/value blocks go round the ring again with their gradient accumulators, each
    block's weights recomputed from the saved ℓ; after the last step the accumulators go home."""
    q_pos = positions(ring.n, ring.size, ring.rank, ring.layout)
    dead = torch.isneginf(lse)  # rows with no key anywhere: zero gradient, and no −∞ in the kernel
    if not host_checks(lse) or bool(dead.any()):
        lse, dout = lse.masked_fill(dead, 0.0), dout.masked_fill(dead[..., None], 0.0)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k, memory_format=torch.contiguous_format)
    dv = torch.zeros_like(v, memory_format=torch.contiguous_format)
    cur = _travelling(k, v, pad)
    for step, k_pos in ring.steps():
        kpad = cur[2] > 0.5 if pad is not None else None
        for call in _calls(q_pos, k_pos, kpad, ring.n, ring.pattern, ring.causal, q.device)[0]:
            gq, gk, gv = _block_backward(dout, q, cur[0], cur[1], out, lse, call, ring.scale)
            dq[..., call.rows, :] += gq
            dk[..., call.cols, :] += gk
            dv[..., call.cols, :] += gv
        if step + 1 < ring.size:
            ring.shift_(cur + [dk, dv])
    ring.shift_([dk, dv])  # the accumulators of the block this rank holds now belong to the next rank
    return dq, dk, dv


class _RingAttention(torch.autograd.Function):
    """Ring attention with a FlashAttention-style backward: saves q, k, v, out and ℓ (O(n/W · d)), never
    a block's (n/W)² weights."""

    @staticmethod
    def forward(ctx, q, k, v, pad, bad, ring: _Ring):
        (out, lse), hit = _ring_forward(q, k, v, pad, bad, ring)
        ctx.ring = ring
        ctx.save_for_backward(q, k, v, out, lse, pad)
        ctx.mark_non_differentiable(lse, hit)
        return out, lse, hit

    @staticmethod
    def backward(ctx, dout, _dlse, _dhit):
        q, k, v, out, lse, pad = ctx.saved_tensors
        dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, pad, ctx.ring)
        return dq, dk, dv, None, None, None


__all__ = ["ring_attention"]
