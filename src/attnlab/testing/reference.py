"""The float64 reference every case is measured against: plain softmax attention, written here.

    out_i = Σ_j softmax_j(s_ij) v_j,   s_ij = scale · q_i·k_j  over the keys j that row i may attend

It keeps the contract by construction, not by care: every NaN or inf in a key or a value is
replaced by zero before any arithmetic, a forbidden (row, key) pair has weight exactly 0, a row with
no allowed key gives zeros, and a row that may attend a key or value holding NaN or inf gives NaN
(its true value is not defined; the rules never compare it). So NaN or inf at masked positions
reaches neither its output nor its gradients, whether the mask is the same for every row or not,
and it costs two (q, k) matrix products, so the checker's large shapes stay fast.

Shapes: q (b, h, q, d), k (b, h, k, d), v (b, h, k, d_v), allow bool broadcastable to (b, h, q, k),
True = may attend.
"""

from __future__ import annotations

import math

import torch

ALIGNMENTS = ("top_left", "bottom_right")


def causal_pairs(n: int, m: int, causal: str, device=None) -> torch.Tensor:
    """(q, k) bool, True = may attend: key j ≤ query i, counted from the top left (``"top_left"``, as in
    ``torch.nn.functional.scaled_dot_product_attention``) or from the bottom right (``"bottom_right"``:
    the last query sees every key, as in ``attnlab.attention`` and decoding with a cache)."""
    if causal not in ALIGNMENTS:
        raise ValueError(f"causal alignment {causal!r} is not one of {ALIGNMENTS}")
    return torch.ones(n, m, dtype=torch.bool, device=device).tril(m - n if causal == "bottom_right" else 0)


def allowed(allow: torch.Tensor | None, causal: str | bool, shape: tuple[int, int, int, int], device) -> torch.Tensor:
    """The dense (b, h, q, k) bool of pairs that may attend: ``allow`` and, when ``causal`` names an
    alignment (``causal_pairs``), the causal pairs. ``True`` means ``"top_left"``."""
    b, h, n, m = shape
    out = torch.ones(b, h, n, m, dtype=torch.bool, device=device)
    if allow is not None:
        out = out & allow.to(device=device, dtype=torch.bool)
    if causal:
        out = out & causal_pairs(n, m, "top_left" if causal is True else causal, device)
    return out


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allow: torch.Tensor | None = None, *,
              causal: str | bool = False, scale: float | None = None) -> torch.Tensor:
    """Softmax attention in float64: (b, h, q, d_v). Differentiable; see the module docstring."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    b, h, n, d = q.shape
    ok = allowed(allow, causal, (b, h, n, k.shape[-2]), q.device)  # (b, h, q, k)
    dirty = ~(torch.isfinite(k).all(-1) & torch.isfinite(v).all(-1))  # (b, h, k): NaN or inf in the key or value
    zero = torch.zeros((), dtype=torch.float64, device=q.device)
    k, v = (torch.where(torch.isfinite(t), t, zero) for t in (k, v))
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d) if scale is None else scale)  # (b, h, q, k)
    s = torch.where(ok, s, -torch.inf)
    s = torch.where(ok.any(-1, keepdim=True), s, 0.0)  # a fully masked row: any finite scores
    w = torch.where(ok, torch.softmax(s, -1), 0.0)
    out = w @ v  # (b, h, q, d_v)
    sees_dirty = (ok & dirty[..., None, :]).any(-1, keepdim=True)  # (b, h, q, 1)
    return torch.where(sees_dirty, torch.nan, out)

__all__ = ["ALIGNMENTS", "allowed", "causal_pairs", "reference"]
