"""Attention of one block as a partial result ``(out, lse)``, for ``attnlab.kernels.partial.merge``.

For one query row i, with scores s_ij = q_i·k_j · scale over the keys j the mask allows:

    ℓ_i = log Σ_j exp(s_ij)              (−∞ when the row may attend no key)
    o_i = Σ_j exp(s_ij − ℓ_i) v_j         (0 when ℓ_i = −∞)

The output is the core's (``attnlab.functional.attention``); ℓ is computed beside it under the
core's non-finite rule (``zero_nonfinite``, ``finish_nonfinite``): keys and values the mask forbids
never influence it, even NaN or ±inf, and a row whose output is NaN has ℓ = NaN.

Symbols → names: o ``out`` (..., q, d_v); ℓ ``lse`` (..., q); the mask ``mask`` (..., q, k), bool
(True = may attend) or an additive float bias.

Reference: Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html;
Liu et al., "Ring Attention", 2023, https://arxiv.org/abs/2310.01889.
"""

from __future__ import annotations

import torch

from .. import masks
from ..functional.attention import attention, finish_nonfinite, mask_scores, zero_nonfinite
from ..functional.scores import default_scale
from .partial import PartialResult, finish_partial


def _lse(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
         scale: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ℓ (..., q), rows with no key (..., q) bool or None) under the core's non-finite rule."""
    q, k, _, bad_q, bad = zero_nonfinite(query, key, value)  # bad_q (..., q), bad (..., k)
    e = (q * scale) @ k.transpose(-1, -2)  # (..., q, k)
    if mask is None:
        return finish_nonfinite(torch.logsumexp(e, -1)[..., None], bad.any(-1, keepdim=True) | bad_q, None)[..., 0], None
    e = mask_scores(e, mask)  # the core's step: −∞ where forbidden (or + bias)
    allow = masks.allowed(mask).expand_as(e)
    dead = ~allow.any(-1)  # (..., q): rows with no key
    lse = torch.logsumexp(e.masked_fill(dead[..., None], 0.0), -1)  # finite on dead rows, replaced by the caller
    hit = ((allow & bad[..., None, :]).any(-1) | bad_q) & ~dead  # as the core's: a row with no key stays −∞, not NaN
    return finish_nonfinite(lse[..., None], hit, None)[..., 0], dead


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
    out, _ = attention(query, key, value, mask=mask, scale=scale)
    lse, dead = _lse(query, key, value, mask, scale)
    return finish_partial(out, lse, dead)


__all__ = ["attention_lse"]
