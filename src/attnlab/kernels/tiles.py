"""The tile plan of a pattern and its kernels: gathered key blocks per query block, fused or explicit.

    o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j        S(i) = keys the pattern allows

Shape legend: b batch, h heads, n positions, d features, B the block size, nb = ⌈n/B⌉ blocks,
R query blocks of a group, m the key blocks of one query block.

* ``plan``: for every query block, the key blocks the pattern touches (``Pattern.blocks``), padded
  to a common width m inside groups of rows sorted by their count, with the element-level mask of
  each gathered tile (True = may attend): the CPU form of a ``attnlab.kernels.Plan``, which builds it
  once per b·h and holds it (``Plan.tiles``); this function keeps nothing.
* ``plan_forward`` / ``plan_backward``: the tiles through PyTorch's fused CPU flash kernel, returning
  and taking the row log-sum-exp (``attnlab.kernels.partial``), used by ``block_sparse_attention``.
* ``tiles_forward`` / ``tiles_backward`` (the explicit path): scores, one fused ``torch.softmax``,
  the weighted sum; for dropout (a mask replayed in the backward from a per-group seed), d_v ≠ d,
  and torch builds without the private kernel.

The key padding mask comes as ``keys`` (b, nb, B) bool, True = real key (``_key_real``).

Reference: Child et al., "Generating Long Sequences with Sparse Transformers", 2019,
https://arxiv.org/abs/1904.10509; Dao et al., "FlashAttention", 2022, https://arxiv.org/abs/2205.14135.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import torch

from .. import _checks
from ..patterns import Pattern
from . import flash
from .partial import PartialResult, finish_partial, no_keys

# Score elements (b·h·R·B·m·B) computed at once; bounds the working set (~16 MiB fp32).
SCORE_BUDGET = 1 << 22


@dataclass(frozen=True)
class _Group:
    q_blocks: torch.Tensor  # (R,) query blocks in this group
    k_blocks: torch.Tensor  # (R, m) key blocks, padded with block 0
    allow: torch.Tensor | None  # (R, B, m·B) bool, True = may attend; None when every pair may
    valid: torch.Tensor  # (R, m) bool, False on padding slots
    dead: torch.Tensor | None  # (1, 1, R, B, 1) bool rows the pattern gives no key; None if none
    bias: torch.Tensor | None  # (1, R, B, m·B) float32 additive form of allow for the fused kernel


@dataclass(frozen=True)
class Tiles:
    """The gather plan of a pattern at length n, its tiles (see the module docstring)."""

    n: int
    block: int
    n_blocks: int
    groups: tuple[_Group, ...]
    nnz_blocks: int  # non-empty tiles
    allowed: int  # allowed (query, key) pairs


def plan(pattern: Pattern, n: int, block: int, bh: int = 1) -> Tiles:
    """Build the tiles of ``pattern`` at length n for b·h = ``bh`` heads (groups sized to fit
    ``SCORE_BUDGET``); nothing is kept here: a ``attnlab.kernels.Plan`` holds what it builds."""
    nb = -(-n // block)
    nz = pattern.blocks(n, block)  # (nnz, 2), sorted by query block then key block
    counts = torch.bincount(nz[:, 0], minlength=nb)  # key blocks per query block
    starts = torch.cumsum(counts, 0) - counts
    order = torch.argsort(counts, stable=True)
    order = order[counts[order] > 0]  # rows with no key block: zero output, nothing to compute
    groups, allowed, i = [], 0, 0
    while i < len(order):
        m = int(counts[order[i]])
        rows = max(1, SCORE_BUDGET // (bh * block * m * block))
        # widen to the largest count in the next `rows` rows (they are sorted by count)
        j = min(len(order), i + rows)
        m = int(counts[order[j - 1]])
        j = min(j, i + max(1, SCORE_BUDGET // (bh * block * m * block)))
        m = int(counts[order[j - 1]])
        qb = order[i:j]
        slot = torch.arange(m)
        valid = slot[None, :] < counts[qb][:, None]  # (R, m)
        pos = (starts[qb][:, None] + slot[None, :]).clamp(max=len(nz) - 1)
        kb = torch.where(valid, nz[pos, 1], torch.zeros((), dtype=torch.long))  # (R, m)
        ok = pattern.tiles(qb, kb, n, block) & valid.repeat_interleave(block, 1)[:, None, :]
        allowed += int(ok.sum())
        dead = ~ok.any(-1)[None, None, :, :, None]
        allow = None if bool(ok.all()) else ok
        groups.append(_Group(qb, kb, allow, valid, dead if bool(dead.any()) else None, _additive(allow)))
        i = j
    return Tiles(n, block, nb, tuple(groups), len(nz), allowed)


def _blocks(x: torch.Tensor, nb: int, block: int) -> torch.Tensor:
    """(b, h, n, d) → (b, h, nb, B, d), zero-padded to whole blocks."""
    b, h, n, d = x.shape
    if n < nb * block:
        x = torch.cat([x, x.new_zeros(b, h, nb * block - n, d)], 2)
    return x.reshape(b, h, nb, block, d)


def _take(xb: torch.Tensor, blocks: torch.Tensor, buf: torch.Tensor | None = None) -> torch.Tensor:
    """(b, h, nb, B, d) gathered at ``blocks`` (R,) → (b, h, R, B, d) or (R, m) → (b, h, R, m·B, d).

    ``index_select`` on the block axis: one copy, about twice as fast as advanced indexing. With
    ``buf`` (a flat workspace at least that large) the copy goes there instead of into fresh memory,
    which every group would otherwise page-fault in anew."""
    b, h, _, B, d = xb.shape
    idx = blocks.flatten()
    if buf is None:
        g = xb.index_select(2, idx)
    else:
        g = torch.index_select(xb, 2, idx, out=buf[: b * h * idx.numel() * B * d].view(b, h, idx.numel(), B, d))
    return g if blocks.dim() == 1 else g.view(b, h, blocks.shape[0], blocks.shape[1] * B, d)


def _workspaces(pl: Tiles, like: torch.Tensor, widths: tuple[int, ...]) -> list[torch.Tensor]:
    """One flat buffer per width (features d or d_v), large enough for the widest group's gathered key blocks."""
    b, h = like.shape[:2]
    blocks = max((g.k_blocks.numel() for g in pl.groups), default=0)
    return [like.new_empty(b * h * blocks * pl.block * w) for w in widths]


def _scores(qg: torch.Tensor, kg: torch.Tensor, grp: _Group, keys: torch.Tensor | None, B: int) -> torch.Tensor:
    """Masked scores (b, h, R, B, m·B) of a group; qg already scaled; ``keys`` (b, nb, B) True = real key."""
    s = qg @ kg.transpose(-1, -2)  # (b, h, R, B, m·B)
    if grp.allow is not None:
        s.masked_fill_(~grp.allow, float("-inf"))
    if keys is not None:  # (b, nb, B) → (b, 1, R, 1, m·B)
        s.masked_fill_(~keys[:, grp.k_blocks].flatten(2)[:, None, :, None, :], float("-inf"))
    return s


def _dead(grp: _Group, keys: torch.Tensor | None) -> torch.Tensor | None:
    """(b, 1, R, B, 1) bool: query rows of the group that may attend no key; None when the plan has
    none and there is no padding (with padding always a tensor: no host read)."""
    if keys is None:
        return grp.dead
    live = keys[:, grp.k_blocks].flatten(2)[:, :, None, :]  # (b, R, 1, m·B)
    if grp.allow is not None:
        live = live & grp.allow
    return ~live.any(-1)[:, None, :, :, None]


def _softmax(s: torch.Tensor, dead: torch.Tensor | None) -> torch.Tensor:
    """Row softmax of masked scores; rows with no key give zeros instead of NaN."""
    p = torch.softmax(s, -1)  # one fused pass; a row of -inf comes out NaN
    return p.masked_fill_(dead, 0.0) if dead is not None else p


def _dropout_keep(shape: tuple[int, ...], p: float, seed: int, gi: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 7919 * gi)
    return (torch.rand(shape, generator=g) >= p).float().div_(1.0 - p)


@overload
def _additive(allow: torch.Tensor, dtype: torch.dtype = ...) -> torch.Tensor: ...


@overload
def _additive(allow: None, dtype: torch.dtype = ...) -> None: ...


def _additive(allow: torch.Tensor | None, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """allow (R, B, m·B) or (b, R, B, m·B) bool → the additive mask (0 or −inf), (1 or b, R, B, m·B).

    A row with no key is all −inf: the kernel gives it a zero output (overwritten with an lse of
    −inf), and in the backward, where it comes with dout = 0, it contributes nothing."""
    if allow is None:
        return None
    bias = flash.additive(allow, dtype)
    return bias[None] if bias.dim() == 3 else bias


def _bias(grp: _Group, keys: torch.Tensor | None, b: int, h: int, dtype: torch.dtype) -> torch.Tensor | None:
    """Additive mask (b·h or 1, R, B, m·B) of a group, 0 = may attend (the plan's own when no padding)."""
    if keys is None:
        return grp.bias if dtype == torch.float32 or grp.bias is None else grp.bias.to(dtype)
    ka = keys[:, grp.k_blocks].flatten(2)[:, :, None, :]  # (b, R, 1, m·B) True = real key
    bias = _additive(ka if grp.allow is None else ka & grp.allow, dtype)  # (b, R, B, m·B)
    return bias[:, None].expand(b, h, *bias.shape[1:]).reshape(b * h, *bias.shape[1:])


def plan_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pl: Tiles, keys: torch.Tensor | None, scale: float
) -> PartialResult:
    """The plan's tiles with the fused kernel, no autograd: (out (b, h, n, d), lse (b, h, n)).

    Query rows the pattern gives no key (and rows of blocks outside the plan) get out = 0, lse = −inf."""
    b, h, n, d = q.shape
    B, nb = pl.block, pl.n_blocks
    qb, kb, vb = _blocks(q, nb, B), _blocks(k, nb, B), _blocks(v, nb, B)
    out, lse = no_keys(q, (b, h, nb, B, d))  # rows outside the plan keep them
    wk, wv = _workspaces(pl, q, (d, d))
    for grp in pl.groups:
        R = len(grp.q_blocks)
        kg, vg = _take(kb, grp.k_blocks, wk), _take(vb, grp.k_blocks, wv)  # (b, h, R, m·B, d)
        o, lp = flash.FLASH(
            _take(qb, grp.q_blocks).reshape(b * h, R, B, d), kg.reshape(b * h, R, -1, d),
            vg.reshape(b * h, R, -1, d), 0.0, False, attn_mask=_bias(grp, keys, b, h, q.dtype), scale=scale,
        )
        o, lp = o.reshape(b, h, R, B, d), lp.reshape(b, h, R, B).to(lse.dtype)
        dead = _dead(grp, keys)  # (b, 1, R, B, 1) rows with no key, or None
        o, lp = finish_partial(o, lp, None if dead is None else dead[..., 0])
        out.index_copy_(2, grp.q_blocks, o)
        lse.index_copy_(2, grp.q_blocks, lp)
    return PartialResult(out.flatten(2, 3)[:, :, :n], lse.flatten(2, 3)[:, :, :n])


def plan_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    pl: Tiles,
    keys: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of the plan's tiles, given the output and lse of the *whole* softmax;
    rows with no key anywhere must come with dout = 0 and a finite lse."""
    b, h, n, d = q.shape
    B, nb = pl.block, pl.n_blocks
    qb, kb, vb = _blocks(q, nb, B), _blocks(k, nb, B), _blocks(v, nb, B)
    dob, ob = _blocks(dout, nb, B), _blocks(out, nb, B)
    lb = _blocks(lse[..., None], nb, B)[..., 0]  # (b, h, nb, B)
    # contiguous buffers whatever the inputs' strides: the key gradients are added through a flat view
    dq, dk, dv = (torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (qb, kb, vb))
    wk, wv = _workspaces(pl, q, (d, d))
    for grp in pl.groups:
        rows = grp.q_blocks
        R, m = grp.k_blocks.shape
        kg, vg = _take(kb, grp.k_blocks, wk), _take(vb, grp.k_blocks, wv)  # (b, h, R, m·B, d)
        gq, gk, gv = flash.FLASH_BWD(
            _take(dob, rows).reshape(b * h, R, B, d), _take(qb, rows).reshape(b * h, R, B, d), kg.reshape(b * h, R, -1, d),
            vg.reshape(b * h, R, -1, d), _take(ob, rows).reshape(b * h, R, B, d),
            lb.index_select(2, rows).reshape(b * h, R, B), 0.0, False,
            attn_mask=_bias(grp, keys, b, h, q.dtype), scale=scale,
        )
        dq.index_copy_(2, rows, gq.reshape(b, h, R, B, d))
        # the kernel's key gradients are laid out (b·h, m·B, R, d) in memory: add them by key row, no copy
        key_rows = (grp.k_blocks.T.repeat_interleave(B, 0) * B + torch.arange(B).repeat(m)[:, None]).flatten()
        dk.view(b * h, nb * B, d).index_add_(1, key_rows, gk.transpose(1, 2).reshape(b * h, m * B * R, d))
        dv.view(b * h, nb * B, d).index_add_(1, key_rows, gv.transpose(1, 2).reshape(b * h, m * B * R, d))
    return dq.flatten(2, 3)[:, :, :n], dk.flatten(2, 3)[:, :, :n], dv.flatten(2, 3)[:, :, :n]


def tiles_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pl: Tiles,
    keys: torch.Tensor | None,
    scale: float,
    dropout_p: float,
    seed: int,
) -> torch.Tensor:
    """The explicit path, one tile group at a time, no autograd: scores, one fused ``torch.softmax``,
    the weighted sum → out (b, h, n, d_v). For dropout (its mask drawn per group from ``seed`` and
    replayed by ``tiles_backward``), values wider or narrower than the keys, and torch builds
    without the fused kernel."""
    b, h, n, d = q.shape
    dv = v.shape[-1]
    B, nb = pl.block, pl.n_blocks
    qb, kb, vb = _blocks(q, nb, B), _blocks(k, nb, B), _blocks(v, nb, B)
    out = q.new_zeros(b, h, nb, B, dv)
    wk, wv = _workspaces(pl, q, (d, dv))
    for gi, grp in enumerate(pl.groups):
        kg, vg = _take(kb, grp.k_blocks, wk), _take(vb, grp.k_blocks, wv)  # (b, h, R, m·B, d)
        dead = _dead(grp, keys)  # (b, 1, R, B, 1) rows with no key, or None
        p = _softmax(_scores(_take(qb, grp.q_blocks) * scale, kg, grp, keys, B), dead)
        if dropout_p > 0:
            p = p.mul_(_dropout_keep(p.shape, dropout_p, seed, gi))
        o = p @ vg  # (b, h, R, B, d_v)
        out.index_copy_(2, grp.q_blocks, o.masked_fill_(dead, 0.0) if dead is not None else o)
    return out.flatten(2, 3)[:, :, :n].contiguous()  # (b, h, n, d_v)


def tiles_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    pl: Tiles,
    keys: torch.Tensor | None,
    scale: float,
    dropout_p: float,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients (dq, dk, dv) of ``tiles_forward`` (its weights recomputed, its dropout mask replayed)."""
    b, h, n, d = q.shape
    dv_ = v.shape[-1]
    B, nb = pl.block, pl.n_blocks
    qb, kb, vb = _blocks(q, nb, B), _blocks(k, nb, B), _blocks(v, nb, B)
    dob, ob = _blocks(dout.contiguous(), nb, B), _blocks(out, nb, B)
    delta = (dob * ob).sum(-1, keepdim=True)  # (b, h, nb, B, 1) = rowsum(dO ∘ O)
    dq, dk, dv = (torch.zeros_like(x, memory_format=torch.contiguous_format) for x in (qb, kb, vb))
    wk, wv = _workspaces(pl, q, (d, dv_))
    for gi, grp in enumerate(pl.groups):
        rows, idx = grp.q_blocks, grp.k_blocks.flatten()
        R, m = grp.k_blocks.shape
        kg, vg = _take(kb, grp.k_blocks, wk), _take(vb, grp.k_blocks, wv)  # (b, h, R, m·B, d)
        qg, dog = _take(qb, rows), _take(dob, rows)
        dead = _dead(grp, keys)
        if dead is not None:
            dog = dog.masked_fill(dead, 0.0)  # rows with no key: zero output, zero gradients
        qs = qg * scale
        p = _softmax(_scores(qs, kg, grp, keys, B), dead)  # (b, h, R, B, m·B)
        dp = dog @ vg.transpose(-1, -2)
        if dropout_p > 0:
            keep = _dropout_keep(p.shape, dropout_p, seed, gi)
            dvg = ((p * keep).transpose(-1, -2) @ dog).reshape(b, h, R * m, B, dv_)
            dp.mul_(keep)
        else:
            dvg = (p.transpose(-1, -2) @ dog).reshape(b, h, R * m, B, dv_)
        ds = p.mul_(dp.sub_(_take(delta, rows)))  # dS = P ∘ (dP − Δ)
        dq.index_copy_(2, rows, (ds @ kg) * scale)
        dkg = (ds.transpose(-1, -2) @ qs).reshape(b, h, R * m, B, d)
        dk.index_add_(2, idx, dkg)
        dv.index_add_(2, idx, dvg)
    gq, gk, gv = (x.flatten(2, 3)[:, :, :n].contiguous() for x in (dq, dk, dv))
    return gq, gk, gv


@overload
def _key_real(mask: torch.Tensor, b: int, n: int, nb: int, B: int, device: torch.device | str) -> torch.Tensor: ...


@overload
def _key_real(mask: None, b: int, n: int, nb: int, B: int, device: torch.device | str) -> None: ...


def _key_real(
    mask: torch.Tensor | None, b: int, n: int, nb: int, B: int, device: torch.device | str
) -> torch.Tensor | None:
    """A key mask (b, k) or (b, 1, 1, k) bool, True = may attend → (b, nb, B) True = real key (False beyond n)."""
    if mask is None:
        return None
    m = mask
    if m.dim() == 4 and m.shape[1] == 1 and m.shape[2] == 1:
        m = m[:, 0, 0]
    if m.dtype != torch.bool or m.dim() != 2 or m.shape[1] != n or m.shape[0] not in (1, b):
        raise ValueError(
            f"mask must be bool (b, k) or (b, 1, 1, k) with b={b}, k={n} (True = may attend); "
            f"got {_checks.shape(mask)} {mask.dtype}"
        )
    real = m.to(device)
    if nb * B > n:
        real = torch.cat([real, real.new_zeros(real.shape[0], nb * B - n)], 1)
    return real.reshape(real.shape[0], nb, B)


__all__ = ["Tiles", "plan", "plan_forward", "plan_backward", "tiles_forward", "tiles_backward"]
