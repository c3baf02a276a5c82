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
from .agree import agree, signature
from .ddp import World
from .layout import LAYOUTS, check_shards, gather, positions, shard
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
    problem = None
    try:  # this rank's own checks; their outcome is shared with the other ranks before any exchange
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}; got {mode!r}")
        check_shards(q, k, v, mask, scale, pattern, layout)
    except ValueError as e:
        problem = e
    agree(group, problem, signature(q, k, v, mask=mask, causal=causal, pattern=pattern, scale=scale, mode=mode,
                                    layout=layout))
    out = MODES[mode](q, k, v, causal=causal, pattern=pattern, mask=mask,
                      scale=scale, group=group, layout=layout)
    return out, None


__all__ = ["context_parallel_attention", "shard", "gather", "positions", "LAYOUTS", "MODES", "World",
           "ring_attention", "ulysses_attention"]
