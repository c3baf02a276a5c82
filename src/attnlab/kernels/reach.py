"""The reach of non-finite keys through a pattern: which queries may attend one.

    hit_i = ∃ j ∈ S(i): bad_j          S(i) = W(i) ∪ G(i) ∪ R(i)  (``parts.split``)

The non-finite rule of the core (``attnlab.functional.attention.zero_nonfinite``) zeroes
NaN/±inf in q, k and v before the kernel runs and sets to NaN exactly the output rows that
may attend a key or value row that held one. ``reach`` finds those rows from the pattern's
structure alone, so a large negative score (a weight that underflows to 0) does not hide one,
and with tensor algebra only (no host read, no data-dependent branch):

* window W = [i − before, i + after]: a difference of the prefix counts of ``bad``, O(n);
* global tokens G: the global queries see every key, every query sees the global keys, O(n);
* the rest R: per group of the tile plan, the tiles' allowed pairs (R, B, m·B) as a float matrix
  times the gathered ``bad`` of the b·h heads (R, m·B, b·h): one batched GEMM of the plan's size
  over d = 1 (a 1/d share of the attention's own GEMMs).

Symbols → names: bad_j ``bad`` (b, h, n) bool (True = the key or value row j held a NaN/±inf,
padded keys already zeroed by the caller); hit ``hit`` (b, h, n) bool; B ``block``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..patterns import Pattern
from .plans import Plan
from .tiles import Tiles, _blocks, _take


def _window(bad: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """(b, h, n) bool → (b, h, n): some j in [i − before, i + after] is bad."""
    n = bad.shape[-1]
    c = F.pad(torch.cumsum(bad, -1, dtype=torch.int32), (1, 0))  # (b, h, n + 1): c_j = #bad in [0, j)
    i = torch.arange(n, device=bad.device)
    hi, lo = (i + after + 1).clamp(max=n), (i - before).clamp(min=0)
    return c.index_select(-1, hi) > c.index_select(-1, lo)


def _global(bad: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """(b, h, n) → (b, h, n): query i in g sees every key; every query sees the keys in g."""
    rows = torch.zeros(bad.shape[-1], dtype=torch.bool, device=bad.device).index_fill_(0, g, True)
    return bad.index_select(-1, g).any(-1, keepdim=True) | (bad.any(-1, keepdim=True) & rows)


def _tiles(bad: torch.Tensor, pl: Tiles) -> torch.Tensor:
    """(b, h, n) → (b, h, n): some allowed key of the plan's tiles is bad (rows outside the plan: False)."""
    b, h, n = bad.shape
    B, nb = pl.block, pl.n_blocks
    hit = torch.zeros(b, h, nb, B, dtype=torch.bool, device=bad.device)
    bb = _blocks(bad.to(torch.float32)[..., None], nb, B)  # (b, h, nb, B, 1)
    for grp in pl.groups:
        R = len(grp.q_blocks)
        kg = _take(bb, grp.k_blocks)[..., 0]  # (b, h, R, m·B)
        if grp.allow is None:  # every pair of the group's tiles allowed
            r = (kg.sum(-1, keepdim=True) > 0).expand(b, h, R, B)
        else:  # (R, B, m·B) @ (R, m·B, b·h) → (R, B, b·h)
            r = torch.bmm(grp.allow.to(torch.float32), kg.flatten(0, 1).permute(1, 2, 0)) > 0
            r = r.permute(2, 0, 1).reshape(b, h, R, B)
        hit.index_copy_(2, grp.q_blocks.to(bad.device), r)
    return hit.flatten(2)[..., :n]


def reach(bad: torch.Tensor, pattern: Pattern | Plan, block: int = 64, bh: int | None = None) -> torch.Tensor:
    """bad (b, h, n) bool → hit (b, h, n) bool: the queries that ``pattern`` lets attend a bad key.

    ``pattern``: a ``Plan`` (its parts and tiles; ``block`` unused) or a pattern (a plan of tiles of
    ``block`` built for this call). ``bh``: the tiles to use (a plan holds them per b·h; by default b·h)."""
    b, h, n = bad.shape
    pl = pattern if isinstance(pattern, Plan) else Plan(pattern, n, block=block)
    win, glob, rest = pl.parts
    hit = torch.zeros(b, h, n, dtype=torch.bool, device=bad.device)
    if win is not None:
        hit = hit | _window(bad, win.before, win.after)
    if glob is not None:
        g = glob.indices[glob.indices < n]
        if len(g):
            hit = hit | _global(bad, g.to(bad.device))
    if rest is not None:
        hit = hit | _tiles(bad, pl.tiles(b * h if bh is None else bh, rest=True))
    return hit


__all__ = ["reach"]
