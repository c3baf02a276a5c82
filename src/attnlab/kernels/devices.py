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
from ..patterns import Combined, GlobalTokens, Pattern

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
    """The flex ``BlockMask`` of ``pattern`` at length n on ``device`` (built once, then cached)."""
    from torch.nn.attention.flex_attention import create_block_mask

    device = torch.device(device)
    cache = _BLOCK_MASKS.setdefault(pattern, {})
    key = (n, str(device), block)
    if key not in cache:

        allows = _index_fn(pattern, n, device)

        def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            return allows(q_idx, kv_idx)

        cache[key] = create_block_mask(mask_mod, None, None, n, n, device=str(device), BLOCK_SIZE=block)
    return cache[key]


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
    if not return_lse:  # flex gives rows with no key a zero output itself
        return fn(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale)
    out, aux = fn(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale, return_aux=AuxRequest(lse=True))
    return torch.where(torch.isneginf(aux.lse)[..., None], 0.0, out), aux.lse


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

__all__ = ["backend_for", "block_mask", "flex_pattern_attention", "ATTEND"]
