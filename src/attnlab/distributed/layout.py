"""Which positions of a sequence each process holds: ``shard`` and ``gather``.

A sequence of n positions is split across the W processes of a group along one
dimension (the sequence dimension, ``dim=-2`` for ``(b, h, n, d)``):

| layout         | rank r holds                                   | why                                  |
|----------------|------------------------------------------------|--------------------------------------|
| ``contiguous`` | positions [r·n/W, (r+1)·n/W)                   | windows need only their neighbours   |
| ``zigzag``     | chunks r and 2W−1−r of 2W equal chunks         | causal work is the same on each rank |

(zigzag: Brandon et al. 2023, "Striped Attention", and the load-balanced ring of
Llama 3's context parallelism.) n must be divisible by W (contiguous) or 2W (zigzag).

``shard`` is a differentiable slice; ``gather`` an all-gather whose backward
hands each rank the gradient of its own slice (``comm.all_gather``).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from .. import _checks
from ..patterns import Pattern
from .comm import all_gather

LAYOUTS = ("contiguous", "zigzag")


def world(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """(this process's rank, the number of processes) in ``group`` (the default group when None)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "attnlab.distributed needs an initialised process group: call "
            "torch.distributed.init_process_group(...) first (torchrun sets the environment for it)"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _check_layout(layout: object) -> None:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}; got {layout!r}")


def positions(n: int, world_size: int, rank: int, layout: str = "contiguous", device=None) -> torch.Tensor:
    """The global indices (n / W,) of the positions that ``rank`` holds, in local order."""
    _check_layout(layout)
    parts = world_size if layout == "contiguous" else 2 * world_size
    if n % parts:
        raise ValueError(
            f"a sequence of n={n} positions does not split evenly: the {layout} layout over "
            f"{world_size} processes needs n divisible by {parts}; pad the sequence (and mask the padding)"
        )
    c = n // parts
    if layout == "contiguous":
        return torch.arange(rank * c, (rank + 1) * c, device=device)
    other = parts - 1 - rank
    return torch.cat([torch.arange(rank * c, (rank + 1) * c, device=device),
                      torch.arange(other * c, (other + 1) * c, device=device)])


def check_shards(
    q: object, k: object, v: object, mask: object, scale: object, pattern: object, layout: object,
) -> float | None:
    """Entry checks of the context-parallel attentions → the scale (None: 1/√d).

    q, k (b, h, n/W, d) and v (b, h, n/W, d_v) of one floating dtype; ``mask`` bool (b, n/W), True = may attend (a real key);
    ``pattern`` None or an ``attnlab.patterns.Pattern``; ``layout`` one of ``LAYOUTS``."""
    _check_layout(layout)
    if pattern is not None and not isinstance(pattern, Pattern):
        raise ValueError(f"pattern must be None or an attnlab.patterns.Pattern; got {type(pattern).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if _checks.tensor(name, t).dim() != 4:
            raise ValueError(f"{name} must be this rank's shard (b, h, n/W, d); got shape {_checks.shape(t)}")
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)  # checked
    if q.shape[:3] != k.shape[:3] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            "q, k and v must share (b, h, n/W) (self-attention over one sharded sequence); got "
            f"q {_checks.shape(q)}, k {_checks.shape(k)}, v {_checks.shape(v)}"
        )
    _checks.floating(("q", "k", "v"), (q, k, v))
    _checks.features("q", q)
    _checks.features_match("context-parallel attention", q, k)
    m = mask
    if m is not None and (not isinstance(m, torch.Tensor) or m.dtype != torch.bool or tuple(m.shape) != (q.shape[0], q.shape[2])):
        got = f"{m.dtype} {_checks.shape(m)}" if isinstance(m, torch.Tensor) else type(m).__name__
        raise ValueError(
            f"mask must be bool (b, n/W) = ({q.shape[0]}, {q.shape[2]}), True = may attend (a real key); got {got}"
        )
    return None if scale is None else _checks.scale(scale)


def empty_result(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor | None:
    """The output (b, h, n/W, d_v) when it has no element (n = 0, or b, h or d_v = 0), else None.

    Every rank holds shards of one size, so all ranks take this branch together (no peer left waiting).
    The result joins the inputs' graph without reading them: their gradients are zeros."""
    shape = (*q.shape[:-1], v.shape[-1])
    if math.prod(shape):
        return None
    zero = sum(t.flatten()[:0].sum() for t in (q, k, v))
    return v.new_zeros(shape) + zero


def shard(x: torch.Tensor, dim: int = -2, group: dist.ProcessGroup | None = None, layout: str = "contiguous") -> torch.Tensor:
    """This rank's slice of the whole tensor ``x`` along ``dim`` (every rank passes the same ``x``)."""
    rank, size = world(group)
    idx = positions(x.shape[dim], size, rank, layout, device=x.device)
    if layout == "contiguous":
        return x.narrow(dim, int(idx[0]) if len(idx) else 0, len(idx))
    return x.index_select(dim, idx)


def gather(x_local: torch.Tensor, dim: int = -2, group: dist.ProcessGroup | None = None, layout: str = "contiguous") -> torch.Tensor:
    """The whole tensor on every rank from the ranks' slices (the inverse of ``shard``); differentiable."""
    rank, size = world(group)
    _check_layout(layout)
    whole = all_gather(x_local, dim % x_local.dim(), group)  # in rank order
    if layout == "contiguous":
        return whole
    n = whole.shape[dim]
    order = torch.cat([positions(n, size, r, layout, device=x_local.device) for r in range(size)])
    return whole.index_select(dim, torch.argsort(order))  # back to sequence order


__all__ = ["LAYOUTS", "positions", "shard", "gather", "world", "check_shards", "empty_result"]
