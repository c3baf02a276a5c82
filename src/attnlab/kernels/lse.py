"""Attention of one block as a partial result ``(out, lse)``, for ``attnlab.kernels.partial.merge``.

For one query row i, with scores s_ij = q_i·k_j · scale over the keys j the mask allows:

    ℓ_i = log Σ_j exp(s_ij)              (−∞ when the row may attend no key)
    o_i = Σ_j exp(s_ij − ℓ_i) v_j         (0 when ℓ_i = −∞)

Both come from the core in one call (``attnlab.functional.attention(..., return_lse=True)``: one
score computation), under the core's non-finite rule: keys and values the mask forbids
never influence it, even NaN or ±inf, and a row whose output is NaN has ℓ = NaN.

Symbols → names: o ``out`` (..., q, d_v); ℓ ``lse`` (..., q); the mask ``mask`` (..., q, k), bool
(True = may attend) or an additive float bias.

Reference: Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html;
Liu et al., "Ring Attention", 2023, https://arxiv.org/abs/2310.01889.
"""

from __future__ import annotations

import torch

from ..functional.attention import attention
from ..functional.scores import default_scale
from .partial import PartialResult


def attention_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> PartialResult:
    """Scaled dot-product attention of one block: ``PartialResult(out (..., q, d_v), lse (..., q))``.

    Keys and values the mask forbids never influence either, even when NaN or inf (no host read);
    a row whose allowed keys hold a non-finite one, or whose query does, gets ℓ = NaN, as its output
    is NaN; a row with no key gets out = 0, ℓ = −∞. Differentiable in all inputs, with finite
    gradients beside rows with no key."""
    d = query.shape[-1]
    if d == 0:
        raise ValueError(f"query and key need at least one feature (d >= 1); got query {tuple(query.shape)}")
    scale = default_scale(d) if scale is None else float(scale)
    out, lse = attention(query, key, value, mask=mask, scale=scale, return_lse=True)
    assert lse is not None  # (return_lse)
    return PartialResult(out, lse)


__all__ = ["attention_lse"]
