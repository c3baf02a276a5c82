"""Which kernel runs a pattern: chosen by the tensors' device, never by what the torch build has.

    o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j        S(i) = keys the pattern allows

* **cpu**: the block-sparse CPU kernels (``attnlab.kernels.block_sparse``: bands, global
  parts and gathered tiles through PyTorch's fused CPU flash kernel).
* **cuda**: ``torch.nn.attention.flex_attention`` (Dong et al., "Flex Attention", 2024,
  https://arxiv.org/abs/2412.05496) with a ``BlockMask`` built by ``create_block_mask`` from the
  pattern's index function (``mask_mod(b, h, q_idx, kv_idx) = pattern.allows(q_idx, kv_idx, n)``),
  built once per (pattern, n, device) and cached in a ``WeakKeyDictionary`` keyed by the
  pattern; the key padding mask is a ``score_mod`` (−∞ at padded keys), so one block mask serves
  every batch. Forward and backward are flex's (compiled with ``torch.compile``, once).
* **anything else** (mps, xpu, …): dense masked attention through the core,
  ``attnlab.functional.attention.attention`` with ``pattern.materialize(n) & padding``.

Symbols → names: S(i) ``pattern.allows``; the padding mask ``real`` (b, n), True = real key.
Rows with no key: zero output (flex and the core both give it). Keys and values at padded
positions are zeroed by the caller (``block_sparse_attention``) before they reach any backend.

Shapes: q, k (b, h, n, d), v (b, h, n, d_v), ``real`` (b, n) bool or None.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

import torch

from ..functional.attention import attention
from ..patterns import Combined, Documents, GlobalTokens, Pattern, Window
from .partial import finish_partial

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

IndexFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q_idx, kv_idx) -> bool

# pattern → {(n, device): BlockMask}; dropped with the pattern
_BLOCK_MASKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_COMPILED: dict[str, Callable[..., Any]] = {}
FLEX_BLOCK = 128  # flex's tile on CUDA


def backend_for(device: torch.device) -> str:
    """``"cpu"``, ``"flex"`` (CUDA) or ``"dense"`` (any other device) for tensors on ``device``."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "flex"
    return "dense"


def block_mask(pattern: Pattern, n: int, device: torch.device | str, block: int = FLEX_BLOCK) -> BlockMask:
    """The flex ``BlockMask`` of ``pattern`` at length n on ``device`` (built once, then cached).

    Built from the pattern's own block structure (``tile_kinds``), never by evaluating the mask at
    all n² pairs; the tiles whose every pair is allowed become flex's *full* blocks (no mask
    function inside). flex's index tables are (n/B)² int32 each (four of them), the same as
    ``create_block_mask`` keeps."""
    from torch.nn.attention.flex_attention import BlockMask

    device = torch.device(device)
    cache = _BLOCK_MASKS.setdefault(pattern, {})
    key = (n, str(device), block)
    if key not in cache:
        allows = _index_fn(pattern, n, device)

        def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return allows(q_idx, kv_idx)

        tiles, kind = tile_kinds(pattern, n, block, "cpu")  # (planned on the host, then moved: any device)
        nb = -(-n // block)
        part, full = tiles[kind == 1], tiles[kind == 2]
        cache[key] = BlockMask(
            seq_lengths=(n, n),
            kv_num_blocks=_counts(part[:, 0], nb), kv_indices=_table(part, nb),
            full_kv_num_blocks=_counts(full[:, 0], nb), full_kv_indices=_table(full, nb),
            q_num_blocks=_counts(part[:, 1], nb), q_indices=_table(part.flip(-1), nb),
            full_q_num_blocks=_counts(full[:, 1], nb), full_q_indices=_table(full.flip(-1), nb),
            BLOCK_SIZE=(block, block), mask_mod=mask_mod,
        ).to(device)
    return cache[key]


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


def _flex_fn(compiled: bool) -> Callable[..., Any]:
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


@overload
def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: Literal[False] = False, block: int | None = None) -> torch.Tensor: ...


@overload
def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: Literal[True], block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...


def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: bool = False,
                           block: int | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Pattern attention through ``flex_attention``: out (b, h, n, d_v) [and lse (b, h, n), −inf on
    rows with no key]. ``compiled`` defaults to True on CUDA (eager flex materialises the scores and
    has no CPU backward; the CPU tests run it eagerly, forward only)."""
    from torch.nn.attention.flex_attention import AuxRequest

    b, h, n, _ = q.shape
    if compiled is None:
        compiled = q.device.type == "cuda"
    bm = block_mask(pattern, n, q.device, block or (FLEX_BLOCK if q.device.type == "cuda" else 64))
    score_mod = None
    if real is not None:  # one block mask for every batch: padding as −∞ on the padded keys' scores

        def score_mod(
            score: torch.Tensor, bi: torch.Tensor, hi: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            return torch.where(real[bi, kv_idx], score, float("-inf"))

    fn = _flex_fn(compiled)
    d_v = v.shape[-1]
    q, k, v = _wide_heads(q, k, v)
    if not return_lse:  # flex gives rows with no key a zero output itself
        return fn(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale)[..., :d_v]
    out, aux = fn(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale, return_aux=AuxRequest(lse=True))
    return finish_partial(out[..., :d_v], aux.lse, torch.isneginf(aux.lse))


FLEX_MIN_HEAD = 16  # flex's kernels need head dimensions of at least 16


def _wide_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Head dimensions below flex's minimum padded with zero features: q·k and the weights are
    unchanged (the scale is passed explicitly), the output's extra features are zero and cut off."""
    def wide(t: torch.Tensor) -> torch.Tensor:
        return t if t.shape[-1] >= FLEX_MIN_HEAD else torch.nn.functional.pad(t, (0, FLEX_MIN_HEAD - t.shape[-1]))

    return wide(q), wide(k), wide(v)


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern, real: torch.Tensor | None,
          scale: float, dropout_p: float) -> torch.Tensor:
    if dropout_p > 0:  # flex has no dropout: the dense path drops weights
        return _dense(q, k, v, pattern, real, scale, dropout_p)
    return flex_pattern_attention(q, k, v, pattern, real, scale)


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern, real: torch.Tensor | None,
           scale: float, dropout_p: float) -> torch.Tensor:
    """Dense masked attention through the core (any device): O(n²) memory, the pattern's semantics."""
    n = q.shape[-2]
    mask = pattern.materialize(n, device=q.device)  # (n, n)
    if real is not None:
        mask = mask & real[:, None, None, :]  # (b, 1, n, n)
    return attention(q, k, v, mask=mask, scale=scale, dropout_p=dropout_p)[0]


ATTEND: dict[str, Callable[..., torch.Tensor]] = {"flex": _flex, "dense": _dense}

__all__ = ["backend_for", "block_mask", "tile_kinds", "flex_pattern_attention", "ATTEND"]
