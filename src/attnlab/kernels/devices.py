"""Which kernel runs a pattern: chosen by the tensors' device, never by what the torch build has.

    o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j        S(i) = keys the pattern allows

* **cpu**: the block-sparse CPU kernels (``attnlab.kernels.block_sparse``: bands, global
  parts and gathered tiles through PyTorch's fused CPU flash kernel).
* **cuda**: ``torch.nn.attention.flex_attention`` (Dong et al., "Flex Attention", 2024,
  https://arxiv.org/abs/2412.05496) with a ``BlockMask`` built by ``create_block_mask`` from the
  pattern's index function (``mask_mod(b, h, q_idx, kv_idx) = pattern.allows(q_idx, kv_idx, n)``),
  built once per plan (``attnlab.kernels.Plan.block_mask``, held by the plan, which a call with a
  pattern finds on the pattern); the key padding mask is a ``score_mod`` (−∞ at padded keys), so one block mask serves
  every batch. Forward and backward are flex's (compiled with ``torch.compile``, once).
* **anything else** (mps, xpu, …): dense masked attention through the core,
  ``attnlab.functional.attention.attention`` with ``pattern.materialize(n) & padding``.

Symbols → names: S(i) ``pattern.allows``; the padding mask ``real`` (b, n), True = real key.
Rows with no key: zero output (flex and the core both give it). Keys and values at padded
positions are zeroed by the caller (``block_sparse_attention``) before they reach any backend.

Shapes: q, k (b, h, n, d), v (b, h, n, d_v), ``real`` (b, n) bool or None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, overload

import torch

from ..functional.attention import attention
from ..patterns import Pattern
from .flex_mask import FLEX_BLOCK, block_mask, tile_kinds
from .partial import finish_partial
from .plans import Plan, as_plan

if TYPE_CHECKING:
    pass

_COMPILED: dict[str, Callable[..., Any]] = {}


def backend_for(device: torch.device) -> str:
    """``"cpu"``, ``"flex"`` (CUDA) or ``"dense"`` (any other device) for tensors on ``device``."""
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "flex"
    return "dense"


def _flex_fn(compiled: bool) -> Callable[..., Any]:
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


@overload
def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern | Plan,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: Literal[False] = False, block: int | None = None) -> torch.Tensor: ...


@overload
def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern | Plan,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: Literal[True], block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]: ...


def flex_pattern_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Pattern | Plan,
                           real: torch.Tensor | None, scale: float, *, compiled: bool | None = None,
                           return_lse: bool = False,
                           block: int | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Pattern attention through ``flex_attention``: out (b, h, n, d_v) [and lse (b, h, n), −inf on
    rows with no key]. ``pattern``: a pattern (its plan: ``attnlab.kernels.plan``, held on the
    pattern) or a ``Plan`` for this n and device, whose ``BlockMask`` it holds. ``compiled`` defaults
    to True on CUDA (eager flex materialises the scores and has no CPU backward; the CPU tests run
    it eagerly, forward only)."""
    from torch.nn.attention.flex_attention import AuxRequest

    b, h, n, _ = q.shape
    if compiled is None:
        compiled = q.device.type == "cuda"
    pl = pattern if isinstance(pattern, Plan) else as_plan(pattern, n, None, q.device)
    pl.check(n, q.device)
    bm = pl.block_mask(block or (FLEX_BLOCK if q.device.type == "cuda" else 64))
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


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Plan, real: torch.Tensor | None,
          scale: float, dropout_p: float) -> torch.Tensor:
    if dropout_p > 0:  # flex has no dropout: the dense path drops weights
        return _dense(q, k, v, pattern, real, scale, dropout_p)
    return flex_pattern_attention(q, k, v, pattern, real, scale)


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pattern: Plan, real: torch.Tensor | None,
           scale: float, dropout_p: float) -> torch.Tensor:
    """Dense masked attention through the core (any device): O(n²) memory, the pattern's semantics."""
    n = q.shape[-2]
    mask = pattern.pattern.materialize(n, device=q.device)  # (n, n)
    if real is not None:
        mask = mask & real[:, None, None, :]  # (b, 1, n, n)
    return attention(q, k, v, mask=mask, scale=scale, dropout_p=dropout_p)[0]


ATTEND: dict[str, Callable[..., torch.Tensor]] = {"flex": _flex, "dense": _dense}

__all__ = ["backend_for", "block_mask", "tile_kinds", "flex_pattern_attention", "ATTEND"]
