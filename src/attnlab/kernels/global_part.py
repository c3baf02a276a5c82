"""Global tokens as two dense parts of a merged softmax (Longformer's global attention).

    global_tokens(G): query i may attend key j  ⟺  i ∈ G or j ∈ G

Beside a sliding window W, the global pairs that W does not already hold split
into two disjoint dense blocks, each one call of the fused kernel with no gather
of tiles (``attnlab.kernels.flash``):

* **columns**: every query × the keys in G, minus the pairs in W;
* **rows**: the queries in G × the keys not in G, minus the pairs in W.

The columns part returns (out, lse) over all n query rows, the rows part over
the g global rows (rows without a key in a part: out = 0, lse = −inf), for
``partial.merge`` and ``partial.merge_rows``; the backward takes the merged output and lse and returns this
part's share of the gradients.

Shapes: q, k (b, h, n, d), v (b, h, n, d), G (g,) sorted key positions < n,
``real`` (b, n) bool (True = real key) or None, ``window`` a ``Window`` or None.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..patterns import Window
from . import flash
from .partial import PartialResult, finish_partial

# (query positions or None for all, key positions or None for all, allowed)
_Part = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]


def _allowed(
    window: Window | None, rows: torch.Tensor, cols: torch.Tensor, n: int, real: torch.Tensor | None, device: torch.device
) -> torch.Tensor:
    """(r, c) or (b, 1, r, c) bool: pairs (rows × cols) outside the window, keys not padded."""
    allow = torch.ones(len(rows), len(cols), dtype=torch.bool)
    if window is not None:
        allow = ~window.allows(rows[:, None], cols[None, :], n)
    allow = allow.to(device)
    if real is not None:
        allow = allow & real[:, cols.to(device)][:, None, None, :]  # (b, 1, r, c)
    return allow


def _parts(q: torch.Tensor, glob: torch.Tensor, window: Window | None, real: torch.Tensor | None) -> list[_Part]:
    """[(query positions or None for all, key positions or None for all, allowed)] of the two parts.

    The rows part takes all n keys with the global ones masked out (a mask of g·n, no gather)."""
    b, h, n, _ = q.shape
    everyone = torch.arange(n)
    parts: list[_Part] = [(None, glob, _allowed(window, everyone, glob, n, real, q.device))]
    if len(glob) < n:  # no rows part when every position is global
        allow = _allowed(window, glob, everyone, n, real, q.device) & ~torch.isin(everyone, glob).to(q.device)
        parts.append((glob, None, allow))
    return parts


def _mask(allow: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return flash.additive(allow, dtype)  # (r, c) or (b, 1, r, c): broadcast over the heads


def global_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    glob: torch.Tensor,
    window: Window | None,
    real: torch.Tensor | None,
    scale: float,
) -> tuple[PartialResult, tuple[PartialResult, torch.Tensor] | None]:
    """The parts, no autograd: the columns over all rows (out (b, h, n, d), lse (b, h, n)), for
    ``partial.merge``, and the rows part over the g global rows with their positions
    ((out (b, h, g, d), lse (b, h, g)), (g,)), for ``partial.merge_rows`` (None when every position is global)."""
    cols_part, rows_part = None, None
    for rows, cols, allow in _parts(q, glob, window, real):
        qs = q if rows is None else q.index_select(2, rows.to(q.device))
        ks, vs = (k, v) if cols is None else (k.index_select(2, cols.to(q.device)), v.index_select(2, cols.to(q.device)))
        o, lse = flash.FLASH(qs, ks, vs, 0.0, False, attn_mask=_mask(allow, q.dtype), scale=scale)
        part = finish_partial(o, lse, ~allow.any(-1))  # (r,) or (b, 1, r): rows with no key in this part
        if rows is None:
            cols_part = part
        else:
            rows_part = (part, rows.to(q.device))
    assert cols_part is not None  # _parts always gives the columns part
    return cols_part, rows_part


def global_backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    glob: torch.Tensor,
    window: Window | None,
    real: torch.Tensor | None,
    scale: float,
    acc: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of both parts, given the merged output and lse (rows with no key anywhere:
    dout = 0 and a finite lse); added into ``acc`` (dq, dk, dv) when given."""
    dq, dk, dv = acc if acc is not None else (torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v))
    for rows, cols, allow in _parts(q, glob, window, real):
        r = None if rows is None else rows.to(q.device)
        c = None if cols is None else cols.to(q.device)
        pick: Callable[[torch.Tensor], torch.Tensor] = (lambda t: t) if r is None else partial(torch.index_select, dim=2, index=r)
        ks, vs = (k, v) if c is None else (k.index_select(2, c), v.index_select(2, c))
        gq, gk, gv = flash.FLASH_BWD(
            pick(dout), pick(q), ks, vs, pick(out), pick(lse[..., None])[..., 0].contiguous(), 0.0, False,
            attn_mask=_mask(allow, q.dtype), scale=scale,
        )
        dq.add_(gq) if r is None else dq.index_add_(2, r, gq)
        if c is None:
            dk.add_(gk), dv.add_(gv)
        else:
            dk.index_add_(2, c, gk), dv.index_add_(2, c, gv)
    return dq, dk, dv


__all__ = ["global_forward", "global_backward"]
