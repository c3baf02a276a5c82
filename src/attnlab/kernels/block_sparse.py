"""Block-sparse attention: compute only the tiles a pattern touches, forward and backward.

    o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j        S(i) = keys the pattern allows

Shape legend: b batch, h heads, n positions (q = k = n), d features, B the
block size, nb = ⌈n/B⌉ blocks, m the key blocks of one query block.

How it works (the CPU analogue of Sparse Transformer's and FlashAttention's kernels):

1. **Parts.** The pattern's top-level ``|`` terms are split into disjoint parts
   (``parts.split``, held by the call's plan): a ``sliding_window`` (``band``: banded
   key spans, strided views of k and v, no gather), ``global_tokens``
   (``global_part``: all queries × the global keys, the global queries × the
   other keys, two dense calls), and the rest of the pattern minus both (the
   tile plan below). Each part runs PyTorch's fused CPU flash kernel
   (``aten._scaled_dot_product_flash_attention_for_cpu``: scores, online
   softmax and the weighted sum in one pass, no score tensor) and returns its
   output and row log-sum-exp; ``partial.merge`` combines them exactly.
2. The **tiles** (``tiles``; held by the call's ``Plan`` per batch·heads, ``plans``): for every query
   block, the list of key blocks the rest touches (``Pattern.blocks``), padded
   to a common width m inside groups of rows sorted by their count, and the
   element-level mask of each gathered tile (partial blocks at window edges,
   positions beyond n when n is not a multiple of B). Forward, one group of
   rows at a time: gather the key and value blocks into (b·h, R, m·B, d) and
   call the kernel with the tiles' additive mask.
3. **Backward** (``_kernel_backward``): every part's kernel backward from the *merged*
   output and log-sum-exp (FlashAttention's recomputation), which gives
   exactly that part's share of dQ, dK and dV; the tiles' dK and dV are
   scattered back with ``index_add_``.
4. Dropout, values wider or narrower than the keys, and torch builds without
   the private kernel take an explicit path over the whole plan (scores, one
   fused ``torch.softmax``, a dropout mask replayed from a per-group seed).
5. **One op.** The CPU kernel is registered with ``torch.library.custom_op``
   (``attnlab::block_sparse`` and its backward ``attnlab::block_sparse_backward``,
   each with a fake implementation, joined by ``register_autograd``); the plan
   travels as a number (``_plan_id``, a constant under ``torch.compile``). So
   ``torch.compile(fullgraph=True)`` sees one node, with no graph break, and the
   ``meta`` device gets shapes from the fakes.

Plans: the mask of a call is a ``Plan`` (``attnlab.kernels.plan``), one value holding every
form the kernels build from it (parts, CPU tiles, flex's BlockMask); pass one held plan, or a
pattern, whose plan ``plan`` keeps on the pattern (``pattern.kernel_plans``). Nothing is kept
in a module.

Devices: CPU tensors take the kernels above; CUDA tensors go through
``torch.nn.attention.flex_attention`` with the plan's ``BlockMask`` (from the pattern's
index function), other devices through dense masked attention
(``attnlab.kernels.devices``).

Non-finite keys and values: keys and values the padding mask forbids are
zeroed with ``torch.where`` (no host read) on every device. Beside them, inside
the CPU op, the core's non-finite rule (``attnlab.functional.attention``:
``zero_nonfinite``, ``finish_nonfinite``): NaN/±inf in q, k and v are zeroed
before any tile is computed, so none reaches a row that shares a tile with it,
forward or backward; the rows that may attend a key or value row that held one
(``reach``, from the pattern's structure), or whose own query did, are NaN and
pass no gradient. Keys and values at masked positions never influence an
output or a gradient, as in ``attnlab.attention``. The op checks whether there
is anything to zero (three sums over CPU memory, a CPU kernel's own branch: no
device to wait for, invisible to ``torch.compile``) and copies only then.

A pattern and a general bool mask M (broadcastable to (b, h, n, n), True = may attend) in one call
attend ``pattern AND M`` (``attnlab.kernels.pattern_mask``): on CPU the explicit path over the plan's
tiles, each masked by its blocks of M, with autograd for the backward (no band or global fast path);
on other devices dense masked attention with ``pattern.materialize(n) & M``.

Memory is O(n·m·B) for the plan plus one group's working set: no n × n tensor.
A fully masked row (all its keys padded out, or a pattern row with no key)
gets a zero output and zero gradients. float16/bfloat16 inputs are computed in
float32 and cast back. Dropout on the weights uses a per-group generator seed
saved for the backward, so the recomputation drops the same weights.

Reference: Child et al., "Generating Long Sequences with Sparse Transformers",
2019, https://arxiv.org/abs/1904.10509; Dao et al., "FlashAttention", 2022,
https://arxiv.org/abs/2205.14135 (recomputation from the log-sum-exp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _checks
from ..functional.attention import finish_nonfinite, zero_nonfinite
from ..functional.scores import default_scale
from ..functional.softmax import masked_softmax
from ..patterns import Pattern, Window
from . import devices, flash
from ._compile import assume_constant, when_compiling
from .band import band_backward, band_forward, query_tile
from .global_part import global_backward, global_forward
from .partial import PartialResult, merge, merge_rows
from .pattern_mask import dense_pattern_and_mask, full_mask, is_full_mask, masked_tiles_attention
from .plans import Plan, as_plan, live
from .reach import reach
from .tiles import (
    Tiles,
    _blocks,
    _key_real,
    _scores,
    _take,
    plan_backward,
    plan_forward,
    tiles_backward,
    tiles_forward,
)

# PyTorch's fused CPU flash kernel and its backward are private ops: where a torch
# build lacks them, every group takes the explicit path (same numbers, slower).
HAS_FUSED = flash.HAS_FUSED

_NS = __name__.split(".")[0]  # "attnlab" (a renamed copy, e.g. in benchmarks/bench_sparse_ab.py, gets its own ops)


@assume_constant  # under torch.compile: a constant of the graph, no graph break
def _plan_id(pattern: Pattern | Plan, n: int, block: int | None, device: torch.device) -> int:
    """The number of the call's plan (``as_plan``: the given plan, checked, or the pattern's) for the
    custom ops; ``plans.live`` finds the plan again while it lives."""
    return as_plan(pattern, n, block, device).id


@assume_constant
def _plan_block(plan_id: int) -> int:
    """The tile size of the plan with this number."""
    return live(plan_id).block


def _fused(d: int, d_v: int, dropout_p: float) -> bool:
    return HAS_FUSED and dropout_p == 0 and d_v == d


def _layout(
    plan: Plan, bh: int, grad: bool
) -> tuple[Window | None, int, torch.Tensor | None, Tiles | None]:
    """The fused path's parts: (window or None, query tile T, global positions < n or None, tiles or None)."""
    win, glob, rest = plan.parts
    n = plan.n
    g = None if glob is None else glob.indices[glob.indices < n]
    g = None if g is None or not len(g) else g
    pl = None if rest is None else plan.tiles(bh, rest=True)
    if pl is not None and not pl.groups and (win is not None or g is not None):
        pl = None  # the rest adds no key beyond the window and the global tokens
    if win is None and g is None and pl is None:
        pl = plan.tiles(bh)  # nothing at all: zero output through the tiles
    return win, query_tile(plan.block, grad), g, pl


def _forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor | None, plan: Plan,
    scale: float, dropout_p: float, grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(out (b, h, n, d_v), lse (b, h, n) on the fused path else (0,), the dropout seed) on finite inputs."""
    b, h, n, d = q.shape
    if _fused(d, v.shape[-1], dropout_p):
        win, T, g, pl = _layout(plan, b * h, grad)
        real = None if keys is None else keys.flatten(1)[:, :n].expand(b, n)
        parts: list[PartialResult] = []
        rows_part = None
        if win is not None:
            parts.append(band_forward(q, k, v, win.before, win.after, real, scale, T))
        if g is not None:
            cols_part, rows_part = global_forward(q, k, v, g, win, real, scale)
            parts.append(cols_part)
        if pl is not None:
            parts.append(plan_forward(q, k, v, pl, keys, scale))
        out, lse = merge(parts, inplace=True)  # the kernels' fresh buffers
        if rows_part is not None:
            out, lse = merge_rows(PartialResult(out, lse), *rows_part)
        return out.contiguous(), lse.contiguous(), 0
    seed = int(torch.randint(0, 2**31 - 1, ())) if dropout_p > 0 else 0
    return tiles_forward(q, k, v, plan.tiles(b * h), keys, scale, dropout_p, seed), q.new_empty(0), seed


def _hit(bad_q: torch.Tensor, bad: torch.Tensor, keys: torch.Tensor | None, plan: Plan) -> torch.Tensor:
    """(b, h, n) bool: the rows whose output is NaN, as in the core: they may attend a bad key or
    value row, or their own query is bad and they may attend some key (a row with none stays zero)."""
    b, h, n = bad.shape
    live = torch.ones_like(bad) if keys is None else keys.flatten(1)[:, None, :n].expand(b, h, n)
    hit, alive = reach(torch.cat([bad, live], 1), plan, bh=b * h).split(h, 1)
    return hit | (bad_q & alive)


@torch.library.custom_op(f"{_NS}::block_sparse", mutates_args=())
def _kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor | None, plan_id: int,
            scale: float, dropout_p: float, grad: bool
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The CPU kernel as one op (torch.compile sees one node, the meta device its fake):
    (out (b, h, n, d_v), lse (b, h, n) or (0,), the dropout seed (), hit (b, h, n) bool).

    Fused: a sliding window as contiguous spans (``band``), global tokens as two dense blocks
    (``global_part``), the rest as gathered tiles (``tiles``), merged by their log-sum-exp;
    otherwise the explicit tile path. The core's non-finite rule around it: NaN/±inf in q, k, v
    zeroed first (``zero_nonfinite``: none reaches a tile that rows share, forward or backward),
    NaN in the rows that may attend one (``_hit``, ``finish_nonfinite``). Whether anything needs
    zeroing is read from CPU memory inside this CPU op (no device to wait for, nothing that
    torch.compile or the meta device sees): zeroing finite tensors would change nothing, and on
    clean input the copies would cost ~10 % of the window kernel."""
    plan = live(plan_id)
    b, h, n, _ = q.shape
    plan.check(n, q.device)  # (a number baked into a graph traced at another n would fail here, loudly)
    if _checks.all_finite(q, k, v):
        out, lse, seed = _forward(q, k, v, keys, plan, scale, dropout_p, grad)
        return out, lse, torch.tensor(seed), torch.zeros(b, h, n, dtype=torch.bool)
    q, k, v, bad_q, bad = zero_nonfinite(q, k, v)  # (b, h, n) each
    out, lse, seed = _forward(q, k, v, keys, plan, scale, dropout_p, grad)
    hit = _hit(bad_q, bad, keys, plan)
    return finish_nonfinite(out, hit, None), lse, torch.tensor(seed), hit


@_kernel.register_fake
def _kernel_fake(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor | None, plan_id: int,
                 scale: float, dropout_p: float, grad: bool
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    b, h, n, d = q.shape
    lse = q.new_empty(b, h, n) if _fused(d, v.shape[-1], dropout_p) else q.new_empty(0)
    hit = q.new_empty(b, h, n, dtype=torch.bool)
    return q.new_empty(b, h, n, v.shape[-1]), lse, q.new_empty((), dtype=torch.long), hit


@torch.library.custom_op(f"{_NS}::block_sparse_backward", mutates_args=())
def _kernel_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, seed: torch.Tensor, keys: torch.Tensor | None,
                     plan_id: int, scale: float, dropout_p: float, grad: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of ``_kernel``: each fused part's kernel backward from the *merged* output and
    log-sum-exp (FlashAttention's recomputation), or the explicit path's (its dropout replayed).
    The NaN rows pass no gradient, as ``torch.where`` in the core's ``finish_nonfinite``: on non-finite
    inputs they are found again from the inputs (``_hit``, as in the forward), on finite ones there are none."""
    plan = live(plan_id)
    b, h, n, d = q.shape
    dout = dout.contiguous()
    if not _checks.all_finite(q, k, v):  # as in the forward: the zeroed inputs, no gradient through NaN rows
        q, k, v, bad_q, bad = zero_nonfinite(q, k, v)
        rows = _hit(bad_q, bad, keys, plan)[..., None]
        dout, out = dout.masked_fill(rows, 0.0), out.masked_fill(rows, 0.0)
    if not _fused(d, v.shape[-1], dropout_p):
        return tiles_backward(dout, q, k, v, out, plan.tiles(b * h), keys, scale, dropout_p, int(seed))
    win, T, g, pl = _layout(plan, b * h, grad)
    real = None if keys is None else keys.flatten(1)[:, :n].expand(b, n)
    dead = torch.isneginf(lse)  # rows with no key: zero output, zero gradients (no host read)
    dout, lse = dout.masked_fill(dead[..., None], 0.0), lse.masked_fill(dead, 0.0)
    # (dq, dk, dv): the first part's fresh buffers, the others add into them in place
    acc: tuple[torch.Tensor, ...] | None = None
    if win is not None:
        acc = band_backward(dout, q, k, v, out, lse, win.before, win.after, real, scale, T)
    if g is not None:
        acc = global_backward(dout, q, k, v, out, lse, g, win, real, scale, acc)
    if pl is not None:
        grads = plan_backward(dout, q, k, v, out, lse, pl, keys, scale)
        acc = grads if acc is None else tuple(a.add_(x) for a, x in zip(acc, grads))
    assert acc is not None  # _layout gives at least one part
    dq, dk, dv = (x.contiguous() for x in acc)
    return dq, dk, dv


@_kernel_backward.register_fake
def _kernel_backward_fake(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                          lse: torch.Tensor, seed: torch.Tensor, keys: torch.Tensor | None,
                          plan_id: int, scale: float, dropout_p: float, grad: bool
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)  # contiguous, as the kernel's


def _setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, ...]) -> None:
    q, k, v, keys, plan_id, scale, dropout_p, grad = inputs
    out, lse, seed, _ = output  # (the NaN rows are found again from the inputs in the backward)
    ctx.save_for_backward(q, k, v, out, lse, seed, keys)
    ctx.args = (plan_id, scale, dropout_p, grad)
    ctx.plan = live(plan_id)  # alive until the backward has run


def _backward(
    ctx: Any, dout: torch.Tensor, _dlse: torch.Tensor | None, _dseed: torch.Tensor | None, _dhit: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    q, k, v, out, lse, seed, keys = ctx.saved_tensors
    dq, dk, dv = _kernel_backward(dout, q, k, v, out, lse, seed, keys, *ctx.args)
    return dq, dk, dv, None, None, None, None, None


_kernel.register_autograd(_backward, setup_context=_setup)


@dataclass(frozen=True)
class BlockWeights:
    """The attention weights of the non-empty tiles.

    index:  (nnz, 2) long, the (query block, key block) of each tile.
    values: (b, h, nnz, B, B), the weights inside each tile (0 where masked).
    """

    index: torch.Tensor
    values: torch.Tensor
    block: int
    n: int

    def to_dense(self) -> torch.Tensor:
        """(b, h, n, n) dense weights (small n only)."""
        b, h, nnz, B, _ = self.values.shape
        nb = -(-self.n // B)
        dense = self.values.new_zeros(b, h, nb, nb, B, B)
        dense[:, :, self.index[:, 0], self.index[:, 1]] = self.values
        return dense.transpose(3, 4).reshape(b, h, nb * B, nb * B)[:, :, : self.n, : self.n]




def _validate(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor | None, pattern: object, block: object, mask: object
) -> None:
    """Entry checks: query, key (b, h, n, d), value (b, h, n, d_v) (None: not given), one floating dtype."""
    named = (("query", q), ("key", k)) + ((("value", v),) if v is not None else ())
    for name, t in named:
        _checks.tensor(name, t, 4)
        if t.dim() != 4:
            raise ValueError(f"{name} must be (b, h, n, d); got shape {_checks.shape(t)}")
    vv = k if v is None else v
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != vv.shape[:3] or q.shape[-1] != k.shape[-1]:
        given = ", ".join(f"{name} {_checks.shape(t)}" for name, t in named)
        raise ValueError(
            "block-sparse self-attention needs query, key (b, h, n, d) and value (b, h, n, d_v) with the "
            f"same b, h, n and d; got {given}"
        )
    _checks.floating(tuple(n for n, _ in named), tuple(t for _, t in named))
    if not isinstance(pattern, (Pattern, Plan)):
        raise ValueError(
            f"pattern must be an attnlab.patterns.Pattern or an attnlab.kernels.Plan; got {type(pattern).__name__}"
        )
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block < 1):
        raise ValueError(f"block must be a positive integer; got {block!r}")
    if mask is not None and not isinstance(mask, torch.Tensor):
        raise ValueError(
            "mask must be a bool tensor: a key mask (b, n) or (b, 1, 1, n), or a mask broadcastable to "
            f"(b, h, n, n), True = may attend; got {type(mask).__name__}"
        )


def _rows(rows: object, n: int, device: torch.device) -> torch.Tensor:
    """Query row indices in [0, n) → (r,) long."""
    try:
        r = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(rows, device="cpu")
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"rows must be a 1-D list of integer query indices; got {rows!r}") from None
    if r.dim() != 1 or r.dtype.is_floating_point or r.dtype.is_complex or r.dtype == torch.bool:
        raise ValueError(f"rows must be a 1-D list of integer query indices; got {rows!r}")
    if r.device.type != "meta" and r.numel() and not bool(((r >= 0) & (r < n)).all()):
        raise ValueError(f"rows must be query indices in [0, {n}); got {r.tolist()}")
    return r.to(device=device, dtype=torch.long)


def block_sparse_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    pattern: Pattern | Plan,
    *,
    block: int | None = None,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, BlockWeights | None]:
    """Scaled dot-product self-attention restricted to ``pattern``, computing only its tiles.

    Args:
        query: (b, h, n, d).
        key: (b, h, n, d).
        value: (b, h, n, d_v).
        pattern: an ``attnlab.patterns.Pattern``, or a ``Plan`` of one built for this n and device
            (``attnlab.kernels.plan``; held by the caller: built once, used by every call). A
            pattern's plan is ``plan(pattern, n, block, device=query.device)``, kept on the pattern.
        block: the tile size B (any n works; the last block is padded); default 64, or the plan's
            (a different block with a plan is a ValueError).
        mask: bool, True = may attend; None: every key. Either a key mask (b, n) or (b, 1, 1, n)
            (True = a real key), or a full mask of 3 or 4 dims broadcastable to (b, h, n, n), e.g.
            (b, 1, n, n): the call attends ``pattern AND mask`` (on CPU over the pattern's tiles only,
            each masked by its blocks of the mask; elsewhere dense, ``pattern.materialize(n) & mask``;
            not with ``need_weights``).
        scale: default 1/√d.
        dropout_p: dropout on the weights (pass 0 in eval).
        need_weights: also return the weights of the non-empty tiles (``BlockWeights``).

    Returns:
        ``(output (b, h, n, d_v), weights or None)``; equal to
        ``attnlab.attention(q, k, v, mask=pattern.materialize(n) & mask)``. Keys and values at
        masked positions never influence the output or any gradient, even NaN or ±inf; a row with
        no key gives zeros; b, h or n = 0 gives an empty output of the right shape.

    Device: CPU tensors run the CPU kernels, CUDA tensors ``flex_attention`` (the plan's block mask),
    others dense masked attention (``attnlab.kernels.devices``).
    """
    _validate(query, key, value, pattern, block, mask)
    pid = _plan_id(pattern, query.shape[2], block, query.device)  # (constants under torch.compile)
    block = _plan_block(pid)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1); got {dropout_p}")
    b, h, n, d = query.shape
    if d == 0:
        raise ValueError(f"query and key need at least one feature (d >= 1); got query {_checks.shape(query)}")
    scale = default_scale(d) if scale is None else _checks.scale(scale)
    full = is_full_mask(mask)
    pad = None if full else _key_real(mask, b, n, -(-n // block), block, query.device)
    if full and need_weights:
        raise ValueError("need_weights=True takes a key mask (b, n) or none; with a full (b, h, n, n) mask use "
                         "weights_for_rows(query, key, pattern, rows, mask=mask)")
    if query.numel() == 0 or value.numel() == 0:  # b, h or n is 0 (or d_v is): an empty output, as SDPA gives
        out = value * 0.0 + (query.sum() + key.sum()) * 0.0
        empty = BlockWeights(torch.zeros(0, 2, dtype=torch.long), query.new_zeros(b, h, 0, block, block), block, n)
        return out, (empty if need_weights else None)
    if is_full_mask(mask):
        return _pattern_and_mask(query, key, value, live(pid), mask, scale, dropout_p), None
    real: torch.Tensor | None
    if pad is not None:  # padded keys and values never influence anything, even NaN/inf: zeroed, no host read
        real = pad.flatten(1)[:, None, :n, None]  # (b, 1, n, 1)
        key, value = torch.where(real, key, 0.0), torch.where(real, value, 0.0)
    backend = devices.backend_for(query.device)
    if backend != "cpu":
        real = None if pad is None else pad.flatten(1)[:, :n]
        pl = live(pid)
        out = devices.ATTEND[backend](query, key, value, pl, real, scale, dropout_p)
        weights = None
        if need_weights:  # an inspection path: the tiles' weights computed on CPU copies
            with torch.no_grad():
                qc, kc = query.detach().cpu(), key.detach().cpu()
                w = _tile_weights(qc, kc, pl.tiles(b * h), None if pad is None else pad.cpu(), scale)
            weights = BlockWeights(w.index, w.values.to(query.device), w.block, w.n)
        return out, weights
    dtype = query.dtype
    low = dtype in (torch.float16, torch.bfloat16)
    q, k, v = (t.float() for t in (query, key, value)) if low else (query, key, value)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    out, _, _, hit = _kernel(q, k, v, pad, pid, scale, dropout_p, grad)
    weights = None
    if need_weights:
        zq, zk, _, _, _ = zero_nonfinite(q, k, v)
        weights = _tile_weights(zq, zk, live(pid).tiles(b * h), pad, scale, hit)
    return out.to(dtype), weights


def _pattern_and_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, mask: torch.Tensor,
                      scale: float, dropout_p: float) -> torch.Tensor:
    """The pattern AND a full bool mask (``attnlab.kernels.pattern_mask``): on CPU the plan's tiles,
    each masked by its blocks of the mask; elsewhere dense attention with ``materialize(n) & mask``."""
    b, h, n, _ = q.shape
    M = full_mask(mask, b, h, n, q.device)
    if devices.backend_for(q.device) != "cpu":
        return dense_pattern_and_mask(q, k, v, plan, M, scale, dropout_p)
    low = q.dtype in (torch.float16, torch.bfloat16)
    qf, kf, vf = (t.float() for t in (q, k, v)) if low else (q, k, v)
    return masked_tiles_attention(qf, kf, vf, plan.tiles(b * h), M, scale, dropout_p).to(q.dtype)


@when_compiling(torch.compiler.disable)  # an inspection path: the plan (host reads) and tile-by-tile weights
@torch.no_grad()
def _tile_weights(
    q: torch.Tensor, k: torch.Tensor, pl: Tiles, pad: torch.Tensor | None, scale: float, hit: torch.Tensor | None = None
) -> BlockWeights:
    b, h, n, _ = q.shape
    B, nb = pl.block, pl.n_blocks
    qb, kb = _blocks(q, nb, B) * scale, _blocks(k, nb, B)
    index, values = [], []
    for grp in pl.groups:
        s = _scores(_take(qb, grp.q_blocks), _take(kb, grp.k_blocks), grp, pad, B)
        w = masked_softmax(s, torch.isfinite(s))  # (b, h, R, B, m·B)
        R, m = grp.k_blocks.shape
        w = w.reshape(b, h, R, B, m, B).permute(0, 1, 2, 4, 3, 5)  # (b, h, R, m, B, B)
        keep = grp.valid
        qi = grp.q_blocks[:, None].expand(R, m)
        index.append(torch.stack([qi[keep], grp.k_blocks[keep]], -1))
        values.append(w[:, :, keep])
    idx = torch.cat(index) if index else torch.zeros(0, 2, dtype=torch.long)
    val = torch.cat(values, 2) if values else q.new_zeros(b, h, 0, B, B)
    if hit is not None:  # rows that may attend a non-finite key are NaN, as in attnlab.attention
        rk = _blocks(hit[..., None].to(q.dtype), nb, B)[..., 0] > 0  # (b, h, nb, B)
        val = val.masked_fill(rk[:, :, idx[:, 0], :, None], float("nan"))
    return BlockWeights(idx, val, B, n)


def weights_for_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    pattern: Pattern | Plan,
    rows: torch.Tensor | list[int],
    *,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The weights (b, h, r, n) of the chosen query rows, in O(r·n) memory.

    query, key (b, h, n, d); ``rows`` (r,) query indices; ``mask``: bool, True = may attend: a key mask
    (b, n) or (b, 1, 1, n) (a real key), or a full mask broadcastable to (b, h, n, n); None: every key.
    """
    _validate(query, key, None, pattern, 64, mask)
    if isinstance(pattern, Plan):
        pattern.check(query.shape[2], query.device)
        pattern = pattern.pattern
    b, h, n, d = query.shape
    rows = _rows(rows, n, query.device)
    scale = default_scale(d) if scale is None else _checks.scale(scale)
    s = (query[:, :, rows] * scale) @ key.transpose(-1, -2)  # (b, h, r, n)
    allow = pattern.allows(rows[:, None], torch.arange(n, device=query.device)[None, :], n)  # (r, n)
    if is_full_mask(mask):
        allow = allow & full_mask(mask, b, h, n, query.device)[:, :, rows]  # (b, h, r, n)
    elif mask is not None:
        real = _key_real(mask, b, n, -(-n // 64), 64, query.device).flatten(1)[:, :n]
        allow = allow & real[:, None, None, :]
    return masked_softmax(s, allow)


__all__ = ["block_sparse_attention", "weights_for_rows", "BlockWeights"]
