"""Attention backends: the heads' attention as a value that a module holds.

A backend computes softmax(Q Kᵀ · scale + mask) V for heads that are already projected and
positioned; the module (``MultiHeadAttention``) keeps the projections, the positions (rotary,
ALiBi) and the caches, and calls whichever backend it holds, with no branch on which one it is
(x-transformers' ``Attend`` held by its ``Attention``). Every backend has one call:

    backend(q (b, h, q, d_h), k (b, h_kv, k, d_h), v (b, h_kv, k, d_v), *, mask, causal,
            need_weights, scale, dropout_p, kv_finite) → (out (b, h, q, d_v), weights (b, h, q, k) or None)

h_kv divides h (grouped-query heads: the backend repeats each key/value head for its group).
``mask`` is the module's ``attnlab.Mask`` (``Dense`` takes the value as it is; the others read its key
padding) or what ``attnlab.masks.score_mask`` made of a raw mask: bool True = may attend or a float bias,
broadcastable to (b, h, q, k) (ALiBi's bias already added by the module).

| backend                                  | computes                                                   |
|------------------------------------------|------------------------------------------------------------|
| ``Dense()``                              | every (query, key) pair: ``attnlab.attention`` (SDPA or the reference path) |
| ``BlockSparse(pattern, block=64)``       | self-attention over the pairs ``pattern`` allows, tile by tile (``attnlab.kernels.block_sparse_attention``); mask: a bool (b, 1, 1, n) padding mask |
| ``ContextParallel(group, mode, layout)`` | self-attention of this rank's shard over the whole sharded sequence (``attnlab.distributed.context_parallel_attention``); mask: this rank's (b, n/W) bool padding mask |

Besides the call, a backend says what it takes, so that a module asks before any work is done and
never asks which backend it holds: ``check_module`` (the module's positions and extra keys it
cannot take), ``supports(mask, self_attention=, cached=, need_weights=)`` (True when it can make
the call: the mask as the caller gave it, an ``attnlab.Mask`` or a raw tensor) with ``takes`` (what
it takes, in words, for the module's one refusal), and where this call's positions start
(``position_offset``: a shard of a longer sequence starts at rank · n/W).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks, masks, patterns
from ..functional.attention import attention
from ..functional.multihead import repeat_kv
from ..kernels.block_sparse import block_sparse_attention, weights_for_rows
from ..mask import Mask
from ..patterns import Pattern
from ..trace import active

Result = tuple[torch.Tensor, torch.Tensor | None]
CP_MODES = ("ring", "ulysses")  # attnlab.distributed.MODES, checked when the backend is built
CP_LAYOUTS = ("contiguous", "zigzag")  # attnlab.distributed.LAYOUTS


def _as_tensor(mask: torch.Tensor | Mask | None, q_len: int, k_len: int, device: torch.device) -> torch.Tensor | None:
    """A mask value as the tensor kernels take: its (b, 1, 1, k) key padding, else its dense form."""
    if not isinstance(mask, Mask):
        return mask
    return mask.keys[:, None, None, :] if mask.keys is not None else mask.tensor(q_len, k_len, device)


def _causal_value(mask: torch.Tensor | Mask | None, causal: bool) -> tuple[torch.Tensor | Mask | None, bool]:
    """``Mask.causal()`` as the kernel's own causal flag (self-attention: q = k, so both alignments agree)."""
    return (None, True) if isinstance(mask, Mask) and mask.is_causal else (mask, causal)


def _self_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | Mask | None, causal: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
    """Self-attention's inputs as a kernel over n positions takes them: keys and values repeated to the
    queries' heads (b, h, n, d_h), the mask as a tensor (or None), ``Mask.causal()`` as the causal flag."""
    n = q.shape[-2]
    mask, causal = _causal_value(mask, causal)
    groups = q.shape[1] // k.shape[1]
    return repeat_kv(k, groups), repeat_kv(v, groups), _as_tensor(mask, n, n, q.device), causal


def _padding_or_none(mask: torch.Tensor | None, b: int, n: int) -> bool:
    """No mask, or a bool (b, 1, 1, n) key padding mask (what ``score_mask`` makes of a (b, n) one)."""
    return mask is None or (mask.dtype == torch.bool and tuple(mask.shape) == (b, 1, 1, n))


def _key_padding(mask: torch.Tensor | Mask | None) -> bool:
    """No mask, or key padding alone: ``Mask.padding``, a (b, k) or a (b, 1, 1, k) bool tensor."""
    if mask is None or isinstance(mask, Mask):
        return mask is None or mask.keys is not None
    return mask.dtype == torch.bool and (mask.dim() == 2 or (mask.dim() == 4 and mask.shape[1] == mask.shape[2] == 1))


class Backend:
    """The interface: ``__call__`` on heads, and the checks a module runs before calling it."""

    accepts_extra_keys = False  # torch's add_bias_kv / add_zero_attn columns appended after the real keys
    takes = "every call"  # what ``supports`` accepts, in words (the module's refusal quotes it)
    key_padding_only = False  # True: every mask is key padding, so a 2-D mask reads as (b, k), even when b = q

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | Mask | None = None,
        causal: bool = False, need_weights: bool = False, scale: float | None = None, dropout_p: float = 0.0,
        kv_finite: bool = False,
    ) -> Result:
        raise NotImplementedError

    def check_module(self, *, rope: bool, alibi: bool) -> None:
        """Refuse (``ValueError``) a module's positions that this backend cannot take."""

    def supports(
        self, mask: torch.Tensor | Mask | None, *, self_attention: bool = True, cached: bool = False,
        need_weights: bool = False,
    ) -> bool:
        """Whether this backend makes a call with ``mask`` (an ``attnlab.Mask``, a raw tensor as the caller
        gave it, or None), as self-attention or not, over a cache or not, with weights or not."""
        return True

    def position_offset(self, n: int) -> int:
        """The position of this call's first token within the sequence (n: its length here)."""
        return 0


class Dense(Backend):
    """Every (query, key) pair, by ``attnlab.attention``: any mask, causal, weights, caches, extra keys."""

    accepts_extra_keys = True
    takes = "any mask, causal, weights, caches and cross-attention"

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | Mask | None = None,
        causal: bool = False, need_weights: bool = False, scale: float | None = None, dropout_p: float = 0.0,
        kv_finite: bool = False,
    ) -> Result:
        b, h, q_len, d_h = q.shape
        h_kv = k.shape[1]
        groups = h // h_kv
        if isinstance(mask, Mask):  # a value: key padding reads the same for a group's queries
            per_key = mask.keys is not None
        else:
            mask = masks.in_dtype(mask, q.dtype)  # a float16 bias with float64 queries: in the scores' dtype
            per_key = mask is None or (mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1)
        # one query per head (decoding) with grouped heads: each group's queries attend their key/value head
        # together as (b, h_kv, groups, d_h), so the cache is never copied per step; one query at the end of
        # the keys (bottom-right) may attend every key, so causal masks nothing there
        if groups > 1 and q_len == 1 and not need_weights and per_key:
            ctx, _ = attention(q.reshape(b, h_kv, groups, d_h), k, v, mask=mask, dropout_p=dropout_p,
                               kv_finite=kv_finite, scale=scale)
            return ctx.reshape(b, h, 1, -1), None
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)  # (b, h, k, d_h)
        if need_weights and not active():
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # no-ops after the module's packed copy
        return attention(q, k, v, mask=mask, causal=causal and q_len > 1, dropout_p=dropout_p,
                         need_weights=need_weights, kv_finite=kv_finite, scale=scale)

    def __repr__(self) -> str:
        return "Dense()"


class BlockSparse(Backend):
    """Self-attention over the pairs ``pattern`` allows, only the ``block`` × ``block`` tiles it touches.

    Forward and backward cost O(n·w) for a window of w keys. The mask is bool, True = may attend: a
    (b, 1, 1, n) padding mask (a module passes its (b, n) mask so), or any mask broadcastable to
    (b, h, n, n), e.g. (b, 1, n, n), which the call combines with the pattern (``pattern AND mask``, on
    CPU over the pattern's tiles only); weights, when asked for, are dense (b, h, n, n), for small n.
    The causal pattern (``pattern & attnlab.patterns.causal()``) is composed once here, so the kernel's
    plan for it is kept from call to call.
    """

    def __init__(self, pattern: Pattern, block: int = 64):
        if not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be a positive integer; got {block!r}")
        self.pattern, self.block = pattern, block
        self.causal_pattern = pattern & patterns.causal()

    takes = ("self-attention m(x) without a cache, with no mask or a bool one (True = may attend): an attnlab.Mask "
             "without a bias, a (b, n) padding mask or a bool mask broadcastable to (b, h, n, n)")

    def supports(
        self, mask: torch.Tensor | Mask | None, *, self_attention: bool = True, cached: bool = False,
        need_weights: bool = False,
    ) -> bool:
        bool_mask = mask is None or (not mask.is_bias if isinstance(mask, Mask) else mask.dtype == torch.bool)
        return self_attention and not cached and bool_mask

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | Mask | None = None,
        causal: bool = False, need_weights: bool = False, scale: float | None = None, dropout_p: float = 0.0,
        kv_finite: bool = False,
    ) -> Result:
        b, n = q.shape[0], q.shape[-2]
        k, v, mask, causal = _self_attention(q, k, v, mask, causal)  # k, v: (b, h, n, d_h)
        if mask is not None and mask.dtype != torch.bool:
            raise ValueError(
                f"with a sparse pattern, mask must be bool (True = may attend): a padding mask (b, n) = ({b}, {n}) "
                f"or a mask broadcastable to (b, h, n, n); got shape {_checks.shape(mask)} dtype {mask.dtype}"
            )
        pattern = self.causal_pattern if causal else self.pattern
        ctx, _ = block_sparse_attention(q, k, v, pattern, block=self.block, mask=mask,
                                        dropout_p=dropout_p, scale=scale)
        weights = None
        if need_weights:  # dense (b, h, n, n), by rows
            weights = weights_for_rows(q, k, pattern, torch.arange(n, device=q.device), mask=mask,
                                       scale=scale)
        return ctx, weights

    def check_module(self, *, rope: bool, alibi: bool) -> None:
        if alibi:
            raise ValueError("pattern= and alibi=True do not combine: the block-sparse kernel adds no bias")

    def __repr__(self) -> str:
        return f"BlockSparse({self.pattern!r}, block={self.block})"


class ContextParallel(Backend):
    """Self-attention of this rank's shard (b, h, n/W, d_h) over the whole sequence sharded across ``group``.

    ``group``: a ``torch.distributed`` process group, None for the default one; ``mode``: ``"ring"`` or
    ``"ulysses"``; ``layout``: how the sequence is sharded, ``"contiguous"`` or ``"zigzag"``; ``pattern``:
    an optional ``attnlab.patterns`` pattern (block-sparse on each rank). The mask is this rank's
    (b, n/W) bool padding mask; no cache, no weights (they would be n × n); with rotary positions only on
    the contiguous layout, where this rank's positions start at rank · n/W. Dropout is not applied.
    """

    def __init__(self, group: Any = None, mode: str = "ring", layout: str = "contiguous",
                 pattern: Pattern | None = None):
        if pattern is not None and not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        if mode not in CP_MODES:
            raise ValueError(f"mode must be one of {list(CP_MODES)}; got {mode!r}")
        if layout not in CP_LAYOUTS:
            raise ValueError(f"layout must be one of {CP_LAYOUTS}; got {layout!r}")
        self.group, self.mode, self.layout, self.pattern = group, mode, layout, pattern

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | Mask | None = None,
        causal: bool = False, need_weights: bool = False, scale: float | None = None, dropout_p: float = 0.0,
        kv_finite: bool = False,
    ) -> Result:
        from ..distributed import context_parallel_attention

        b, n = q.shape[0], q.shape[-2]
        k, v, mask, causal = _self_attention(q, k, v, mask, causal)  # k, v: (b, h, n/W, d_h)
        if mask is not None and not _padding_or_none(mask, b, n):
            raise ValueError(f"with context_parallel, mask is this rank's (b, n/W) bool padding mask; got "
                             f"{mask.dtype} {_checks.shape(mask)}")
        keys = None if mask is None else mask.reshape(b, n)  # (b, n/W), True = may attend
        return context_parallel_attention(q, k, v, causal=causal, pattern=self.pattern,
                                          mask=keys, mode=self.mode, group=self.group,
                                          layout=self.layout, scale=scale)

    def check_module(self, *, rope: bool, alibi: bool) -> None:
        if alibi or (rope and self.layout != "contiguous"):
            raise ValueError("context_parallel works without ALiBi, and with rope=True only on the contiguous layout "
                             f"(global positions rank·n/W + i); got alibi={alibi}, rope={rope}, "
                             f"cp_layout={self.layout!r}")

    key_padding_only = True
    takes = ("self-attention m(x) of a sharded sequence, without a cache and without weights (they would be "
             "n × n), with no mask, Mask.causal() or this rank's key padding: Mask.padding(keep), or a (b, n/W) or "
             "(b, 1, 1, n/W) bool mask")

    def supports(
        self, mask: torch.Tensor | Mask | None, *, self_attention: bool = True, cached: bool = False,
        need_weights: bool = False,
    ) -> bool:
        causal = isinstance(mask, Mask) and mask.is_causal
        return self_attention and not cached and not need_weights and (causal or _key_padding(mask))

    def position_offset(self, n: int) -> int:
        from ..distributed.layout import world

        return world(self.group)[0] * n

    def __repr__(self) -> str:
        pattern = "" if self.pattern is None else f", pattern={self.pattern!r}"
        return f"ContextParallel(group={self.group!r}, mode={self.mode!r}, layout={self.layout!r}{pattern})"


__all__ = ["Backend", "Dense", "BlockSparse", "ContextParallel"]
