"""Differential attention (Ye et al. 2024): the difference of two softmax maps cancels common-mode noise.

"Differential Transformer", https://arxiv.org/abs/2410.05258, §2.1, eqs. 1–3:

    [Q_1; Q_2] = X W^Q,  [K_1; K_2] = X W^K,  V = X W^V                       (Q_i, K_i: d; V: 2d)
    DiffAttn(X) = (softmax(Q_1 K_1ᵀ / √d) − λ softmax(Q_2 K_2ᵀ / √d)) V       (eq. 1)
    λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init                          (eq. 2, re-parametrised)
    λ_init = 0.8 − 0.6 · exp(−0.3 · (l − 1))                                  (layer l = 1 … L)
    head_i = (1 − λ_init) · GroupNorm(DiffAttn_i(X))                          (eq. 3, per-head RMSNorm)

Each of the two maps is the one core, ``attnlab.attention`` (fast path when the weights are
not asked for); by linearity A_1 V − λ A_2 V = (A_1 − λ A_2) V, so the output is their
difference and the weights (on request) are A_1 − λ A_2 (rows sum to 1 − λ; entries may be
negative). A masked key gets zero weight in both maps, so it never influences anything; a
query with no allowed key gets zero output.

| paper               | argument / name                       |
|---------------------|---------------------------------------|
| Q_1, K_1 / Q_2, K_2 | ``q1``, ``k1`` / ``q2``, ``k2`` (..., q or k, d) |
| V                   | ``value`` (..., k, d_v), d_v = 2d in the paper |
| λ                   | ``lam`` (a float or a tensor broadcastable to (..., 1, 1)) |
| λ_q1, λ_k1, λ_q2, λ_k2 | ``reparam_lambda`` arguments (d,)  |
| l                   | ``lambda_init(depth)``, depth = l − 1  |
"""

from __future__ import annotations

import math
import numbers
from functools import partial

import torch

from .. import _checks
from .attention import attention


def lambda_init(depth: int) -> float:
    """λ_init = 0.8 − 0.6 · exp(−0.3 · depth), depth = l − 1 the layer's 0-based index."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth (the 0-based layer index, l − 1) must be an integer >= 0; got {depth!r}")
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


def reparam_lambda(
    lambda_q1: torch.Tensor, lambda_k1: torch.Tensor, lambda_q2: torch.Tensor, lambda_k2: torch.Tensor, init: float
) -> torch.Tensor:
    """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init: a scalar tensor (the dot products over the last dim)."""
    return torch.exp((lambda_q1 * lambda_k1).sum(-1)) - torch.exp((lambda_q2 * lambda_k2).sum(-1)) + init


def _check_lam(lam: object, out: torch.Tensor) -> None:
    """λ: a finite number, or a floating tensor that broadcasts to the output's (..., 1, 1)."""
    target = (*out.shape[:-2], 1, 1)
    if isinstance(lam, torch.Tensor) and lam.is_floating_point():
        try:
            if tuple(_checks.broadcast_shapes(lam.shape, target)) == target:
                return
        except RuntimeError:
            pass
    elif not isinstance(lam, (bool, torch.Tensor)) and isinstance(lam, numbers.Real) and math.isfinite(lam):
        return
    given = f"a tensor of shape {_checks.shape(lam)} and dtype {lam.dtype}" if isinstance(lam, torch.Tensor) else repr(lam)
    raise ValueError(f"lam (λ) must be a finite number or a floating tensor that broadcasts to (..., 1, 1) = "
                     f"({', '.join(map(str, target))}); got {given}")


def differential_attention(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    value: torch.Tensor,
    lam: float | torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(softmax(q1 k1ᵀ·scale) − λ softmax(q2 k2ᵀ·scale)) v: ``(output (..., q, d_v), weights (..., q, k) or None)``.

    Masks as in ``attnlab.attention`` (bool True = may attend, float = bias), applied to both maps.
    """
    attend = partial(attention, mask=mask, causal=causal, scale=scale, dropout_p=dropout_p, need_weights=need_weights)
    o1, w1 = attend(q1, k1, value)  # (..., q, d_v), (..., q, k) or None
    o2, w2 = attend(q2, k2, value)
    _check_lam(lam, o1)
    lam_t = torch.as_tensor(lam, dtype=o1.dtype, device=o1.device)
    # attention returns weights iff need_weights, so both are tensors exactly then
    weights = difference(w1, w2, lam_t) if w1 is not None and w2 is not None else None
    return difference(o1, o2, lam_t), weights


def difference(a1: torch.Tensor, a2: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """Step: A_1 − λ A_2 (of the two weight maps, or of their outputs A_i V; eq. 1).  Any shapes that broadcast."""
    return a1 - lam * a2


__all__ = ["differential_attention", "difference", "reparam_lambda", "lambda_init"]
