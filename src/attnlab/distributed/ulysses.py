"""Ulysses attention: trade sequence shards for head shards, attend, trade back.

Jacobs et al. 2023, "DeepSpeed Ulysses", https://arxiv.org/abs/2309.14509.

Each of the W ranks holds all h heads of n/W positions. An all-to-all gives each
rank h/W heads of all n positions; any attnlab attention (dense, causal, or a
sparse pattern through the block-sparse kernel) then runs unchanged on the full
sequence of those heads; a second all-to-all trades back. h must be divisible by W.

Shapes: q, k, v (b, h, n/W, d) on each rank → out (b, h, n/W, d_v);
``mask`` bool (b, n/W), True = may attend (a real key).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .. import patterns as P
from ..functional.attention import attention
from ..kernels import block_sparse_attention
from .call import ShardedCall, context_parallel
from .comm import all_to_all
from .layout import empty_result, positions, world


def _to_heads(x: torch.Tensor, size: int, order: torch.Tensor | None, group) -> torch.Tensor:
    """(b, h, n/W, d) sequence shard → (b, h/W, n, d) head shard, in sequence order."""
    chunks = [c.contiguous() for c in x.chunk(size, dim=1)]  # W × (b, h/W, n/W, d)
    got = all_to_all(chunks, group)
    whole = torch.cat(got, dim=2)  # (b, h/W, n, d), in rank order
    return whole if order is None else whole.index_select(2, torch.argsort(order))


def _to_sequence(x: torch.Tensor, size: int, order: torch.Tensor | None, group) -> torch.Tensor:
    """(b, h/W, n, d) head shard → (b, h, n/W, d) sequence shard (the inverse of ``_to_heads``)."""
    if order is not None:
        x = x.index_select(2, order)  # sequence order → rank order
    chunks = [c.contiguous() for c in x.chunk(size, dim=2)]  # W × (b, h/W, n/W, d)
    got = all_to_all(chunks, group)
    return torch.cat(got, dim=1)


@context_parallel
def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: ShardedCall) -> torch.Tensor:
    """Attention over the whole sharded sequence by head parallelism: this rank's shards q, k, v in,
    its shard out (b, h, n/W, d_v). Called with the options of every context-parallel attention,
    ``ulysses_attention(q, k, v, *, causal=False, pattern=None, mask=None, scale=None, group=None,
    layout="contiguous")`` (``distributed.call.ShardedCall``); h must divide by the world size."""
    scale, size = call.check(q, k, v), world(call.group)[1]
    causal, pattern, mask, layout = call.causal, call.pattern, call.mask, call.layout
    h, c = q.shape[1], q.shape[-2]
    if h % size:
        raise ValueError(
            f"ulysses attention splits the heads across the processes: h={h} heads do not divide by "
            f"the world size {size}; use mode='ring', or a head count divisible by {size}"
        )
    if (empty := empty_result(q, k, v)) is not None:  # empty shards: nothing to trade
        return empty
    n = c * size
    g = call.group or dist.group.WORLD
    order = None if layout == "contiguous" else torch.cat([positions(n, size, r, layout) for r in range(size)]).to(q.device)
    qh, kh, vh = (_to_heads(t, size, order, g) for t in (q, k, v))  # (b, h/W, n, d)
    pad = None
    if mask is not None:
        parts = [torch.empty_like(mask) for _ in range(size)]
        dist.all_gather(parts, mask.contiguous(), group=g)
        pad = torch.cat(parts, dim=-1)  # (b, n), rank order
        if order is not None:
            pad = pad.index_select(-1, torch.argsort(order))
    if pattern is not None and q.device.type == "cpu":
        full = pattern & P.causal() if causal else pattern
        out, _ = block_sparse_attention(qh, kh, vh, full, mask=pad, scale=scale)
    else:
        allow = None if pattern is None else pattern.materialize(n, device=q.device)
        if pad is not None:
            p = pad[:, None, None, :]
            allow = p if allow is None else allow & p
        out, _ = attention(qh, kh, vh, mask=allow, causal=causal, scale=scale)
    return _to_sequence(out, size, order, g)


__all__ = ["ulysses_attention"]
