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

import inspect
from typing import Any

import torch

from .agree import agree, signature
from .call import ShardedCall
from .call import signature as call_signature
from .ddp import World
from .layout import LAYOUTS, gather, positions, shard
from .ring import ring_attention
from .ulysses import ulysses_attention

MODES = {"ring": ring_attention, "ulysses": ulysses_attention}


def context_parallel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mode: str = "ring",
                               **options: Any) -> tuple[torch.Tensor, None]:
    """Self-attention over a sequence sharded across the processes of ``group``.

    ``context_parallel_attention(q, k, v, *, mode="ring", causal=False, pattern=None, mask=None,
    scale=None, group=None, layout="contiguous")``: the options of ``ring_attention`` and
    ``ulysses_attention`` (``distributed.call.ShardedCall``), and

    Args:
        q: this rank's shard of the queries, (b, h, n/W, d).
        k: this rank's shard of the keys, (b, h, n/W, d).
        v: this rank's shard of the values, (b, h, n/W, d_v).
        mode: ``"ring"`` or ``"ulysses"``.
        **options: ``causal``: each position attends itself and earlier positions (global
            positions); ``pattern``: an ``attnlab.patterns`` pattern over the global positions
            (intersected with causal when both are given); ``mask``: bool (b, n/W), True = may
            attend (a real key), over this rank's shard of the keys, None: every key; ``scale``;
            ``group``; ``layout``: how the sequence was sharded (``attnlab.distributed.shard``).

    The ranks first agree that their calls match (``agree``: one line names what differs).

    Returns:
        ``(out (b, h, n/W, d_v), None)``: no weights (they would be n × n).
    """
    call = ShardedCall.of("context_parallel_attention", options)
    problem = None
    try:  # this rank's own checks; their outcome is shared with the other ranks before any exchange
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}; got {mode!r}")
        call.check(q, k, v)
    except ValueError as e:
        problem = e
    agree(call.group, problem, signature(q, k, v, mask=call.mask, causal=call.causal, pattern=call.pattern,
                                         scale=call.scale, mode=mode, layout=call.layout))
    return MODES[mode](q, k, v, **call.options()), None


context_parallel_attention.__signature__ = call_signature(  # type: ignore[attr-defined]
    inspect.Parameter("mode", inspect.Parameter.KEYWORD_ONLY, default="ring", annotation="str"))


__all__ = ["context_parallel_attention", "shard", "gather", "positions", "LAYOUTS", "MODES", "World",
           "ring_attention", "ulysses_attention"]
