"""Padding in self-attention modules: a ``(b, n)`` padding mask marks padded *queries* too.

The rule of ``MultiHeadAttention``, shared by the self-attention modules that project their
own queries, keys and values (linear, differential, latent attention): the input rows of
padded tokens are zeroed with ``torch.where`` before any projection, so NaN or inf there
never reaches an output or a gradient, and the outputs (and weights) of padded tokens are zero.
"""

from __future__ import annotations

import torch


def padded_queries(
    x: torch.Tensor, mask: torch.Tensor | None, padding: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x (b, n, d) and the scores' mask with ``padding`` from ``attnlab.masks.score_mask`` → (x with padded
    rows zeroed, pad (b, n) True = real) when it is a bool (b, 1, 1, k) padding mask whose last n keys are
    these n tokens (k > n: cached tokens before them); else (x, None)."""
    if not padding or mask is None or mask.dtype != torch.bool or x.dim() != 3:
        return x, None
    b, n = x.shape[:2]
    k = mask.shape[-1]
    if tuple(mask.shape) != (b, 1, 1, k) or k < n:
        return x, None
    pad = mask.reshape(b, k)[:, k - n :]  # (b, n)
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
