"""Padding in self-attention modules: a ``(b, n)`` padding mask marks padded *queries* too.

The rule of ``MultiHeadAttention``, shared by the self-attention modules that project their
own queries, keys and values (linear, differential, latent attention): the input rows of
padded tokens are zeroed with ``torch.where`` before any projection, so NaN or inf there
never reaches an output or a gradient, and the outputs (and weights) of padded tokens are zero.
"""

from __future__ import annotations

import torch


def padded_queries(x: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x (b, n, d) and a mask → (x with padded rows zeroed, pad (b, n) True = real) when the mask is a
    bool (b, n) or (b, 1, 1, n) padding mask over the same n; else (x, None)."""
    if mask is None or mask.dtype != torch.bool or x.dim() != 3:
        return x, None
    b, n = x.shape[:2]
    if tuple(mask.shape) not in ((b, n), (b, 1, 1, n)):
        return x, None
    pad = mask.reshape(b, n)
    return torch.where(pad.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device)), pad


def zero_padded(
    out: torch.Tensor, weights: torch.Tensor | None, pad: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Zero the outputs (b, n, d) and weights (b, h, n, k) of padded queries."""
    if pad is None:
        return out, weights
    zero = torch.zeros((), dtype=out.dtype, device=out.device)
    out = torch.where(pad.unsqueeze(-1), out, zero)
    if weights is not None:
        weights = torch.where(pad[:, None, :, None], weights, torch.zeros((), dtype=weights.dtype, device=weights.device))
    return out, weights


__all__ = ["padded_queries", "zero_padded"]
