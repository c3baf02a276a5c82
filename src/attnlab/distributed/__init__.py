"""attnlab.distributed: attention over a sequence sharded across processes, on ``torch.distributed``.

    shard(x, dim=-2, group=None, layout="contiguous" | "zigzag")   → this rank's slice
    gather(x_local, dim=-2, group=None, layout=...)                → the whole tensor on every rank
    context_parallel_attention(q, k, v, *, causal=False, pattern=None, mode="ring" | "ulysses", group=None)
                                                                    → (out_local, None)

q, k, v are this rank's shards (b, h, n/W, d) of one sequence laid out by ``layout``;
the result is this rank's shard of the output, equal to the matching rows of
single-process attention over the whole sequence (forward and backward). ``ring``
passes key/value blocks around the processes and merges partial results by their
log-sum-exp (``ring.py``; a sliding window exchanges only a halo of keys with its
neighbours); ``ulysses`` trades sequence shards for head shards (``ulysses.py``).
Works on any backend ``torch.distributed`` offers (gloo on CPU, NCCL on CUDA).
"""

from __future__ import annotations

import torch

from .. import patterns as P
from .ddp import World
from .layout import LAYOUTS, gather, positions, shard
from .ring import ring_attention
from .ulysses import ulysses_attention

MODES = {"ring": ring_attention, "ulysses": ulysses_attention}


def context_parallel_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    pattern: P.Pattern | None = None,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    mode: str = "ring",
    group=None,
    layout: str = "contiguous",
) -> tuple[torch.Tensor, None]:
    """Self-attention over a sequence sharded across the processes of ``group``.

    Args:
        q: this rank's shard of the queries, (b, h, n/W, d).
        k: this rank's shard of the keys, (b, h, n/W, d).
        v: this rank's shard of the values, (b, h, n/W, d_v).
        causal: each position attends itself and earlier positions (global positions).
        pattern: an ``attnlab.patterns`` pattern over the global positions (intersected with
            causal when both are given).
        mask: bool (b, n/W), True = may attend (a real key), over this rank's shard of the keys;
            None: every key.
        mode: ``"ring"`` or ``"ulysses"``.
        layout: how the sequence was sharded (``attnlab.distributed.shard``).

    Returns:
        ``(out (b, h, n/W, d_v), None)``: no weights (they would be n × n).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}; got {mode!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be this rank's shard (b, h, n/W, d); got {got}")
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"q, k and v must share (b, h, n/W) (self-attention over one sharded sequence); got "
            f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != (q.shape[0], q.shape[2])):
        raise ValueError(
            f"mask must be bool (b, n/W) = ({q.shape[0]}, {q.shape[2]}), True = may attend (a real key); "
            f"got {mask.dtype} {tuple(mask.shape)}"
        )
    out = MODES[mode](q, k, v, causal=causal, pattern=pattern, mask=mask,
                      scale=scale, group=group, layout=layout)
    return out, None


__all__ = ["context_parallel_attention", "shard", "gather", "positions", "LAYOUTS", "MODES", "World",
           "ring_attention", "ulysses_attention"]
