"""The float64 reference every case is measured against: plain softmax attention, written here.

    out_i = Σ_j softmax_j(s_ij) v_j,   s_ij = scale · q_i·k_j  over the keys j that row i may attend

It keeps the contract by construction, not by care: a key no query may attend is replaced by zeros
before any arithmetic, a forbidden (row, key) pair contributes an exact 0 (never ``0 · v``), and a
row with no allowed key gives zeros. So NaN or inf at masked positions never reaches its output or,
when every query masks the key, its gradients.

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
    used = ok.any(-2)[..., None]  # (b, h, k, 1): keys some query may attend
    k = torch.where(used, k, torch.zeros((), dtype=k.dtype, device=k.device))
    v = torch.where(used, v, torch.zeros((), dtype=v.dtype, device=v.device))
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(d) if scale is None else scale)  # (b, h, q, k)
    s = torch.where(ok, s, -torch.inf)
    s = torch.where(ok.any(-1, keepdim=True), s, 0.0)  # a fully masked row: any finite scores
    w = torch.where(ok, torch.softmax(s, -1), 0.0)
    terms = torch.where(ok[..., None], w[..., None] * v[:, :, None], 0.0)  # (b, h, q, k, d_v)
    return terms.sum(-2)


__all__ = ["ALIGNMENTS", "allowed", "causal_pairs", "reference"]
