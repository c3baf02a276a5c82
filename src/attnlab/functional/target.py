"""DIN's target attention as a pure function: the candidate item attends over the user's history.

Zhou et al. 2018, "Deep Interest Network for Click-Through Rate Prediction",
https://arxiv.org/abs/1706.06978, section 4.3 (the activation unit, Fig. 2 and eq. 3):

    features:  x_j = [e_j, v_A, e_j − v_A, e_j ⊙ v_A]        (b, n, 4d)
    hidden:    W_1 x_j + b_1                                   (b, n, h)
    activated: PReLU(·)                                        (b, n, h)
    scores:    a_j = W_2 PReLU(W_1 x_j + b_1) + b_2            (b, n)
    normalise="softmax": weights = softmax(a over the real items), context = Σ_j w_j e_j (the core)
    normalise="none":    weights w_j = a_j · m_j,              context = Σ_j w_j e_j   (DIN's sum pooling)

| paper (DIN)          | argument                       | shape          |
|----------------------|--------------------------------|----------------|
| v_A (candidate)      | ``candidate``                  | (d,) or (b, d) |
| e_1 … e_H (history)  | ``history``                    | (n, d) or (b, n, d) |
| activation unit      | ``w1`` (h, 4d), ``b1`` (h,), ``prelu`` (scalar or (h,)), ``w2`` (1, h), ``b2`` (1,) | |

``mask`` is bool, (n,) or (b, n), True = a real history item. With ``"softmax"`` the scores go
through ``attnlab.functional.attention.attention`` (its masked softmax and non-finite rule); with
``"none"`` the padded rows are zeros before any arithmetic and their weights are zero.
Returns ``(context (b, d) or (d,), weights (b, n) or (n,))`` and records its steps while a trace is active.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _checks
from ..trace import record
from .attention import attention

NORMALISE = ("softmax", "none")


# --- the steps (``functional.steps`` names them for ``attnlab verify``) ------------------------


def din_features(candidate: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
    """[e_j, v_A, e_j − v_A, e_j ⊙ v_A]: candidate (..., 1 | n, d), history (..., n, d) → (..., n, 4d)."""
    c = candidate.expand_as(history)
    return torch.cat([history, c, history - c, history * c], dim=-1)


def unit_hidden(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None) -> torch.Tensor:
    """W_1 x + b_1: (..., 4d) → (..., h)."""
    return F.linear(x, w1, b1)


def unit_activation(h: torch.Tensor, prelu: torch.Tensor) -> torch.Tensor:
    """PReLU(h) = max(0, h) + p · min(0, h), p one slope or one per hidden unit (h's last axis)."""
    if prelu.numel() == 1:
        return F.prelu(h, prelu.reshape(1))
    return F.prelu(h.movedim(-1, 1), prelu).movedim(1, -1)  # torch's PReLU reads its channels on axis 1


def unit_scores(a: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor | None) -> torch.Tensor:
    """a_j = W_2 a + b_2: (..., n, h) → (..., n)."""
    return F.linear(a, w2, b2).squeeze(-1)


def sum_pool_weights(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """DIN's weights: the raw scores, zero at padded items.  (b, n) → (b, n)."""
    if mask is None:
        return scores
    return torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))


def sum_pool(weights: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
    """v_U = Σ_j w_j e_j: (b, n), (b, n, d) → (b, d)."""
    return (weights.unsqueeze(-1) * history).sum(-2)


# --- the mechanism ------------------------------------------------------------------------------


def _activation_unit(candidate: torch.Tensor, history: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None,
                     prelu: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor | None) -> torch.Tensor:
    """The activation unit with its steps recorded: (b, 1, d), (b, n, d) → scores (b, n)."""
    x = din_features(candidate, history)
    record("features", "x_j = [e_j, v_A, e_j − v_A, e_j ⊙ v_A]", x,
           latex=r"x_j = [e_j, v_A, e_j - v_A, e_j \odot v_A]")
    h = unit_hidden(x, w1, b1)
    record("hidden", "W_1 x_j + b_1", h, latex=r"W_1 x_j + b_1")
    a = unit_activation(h, prelu)
    record("activated", "PReLU(W_1 x_j + b_1)", a, latex=r"\mathrm{PReLU}(W_1 x_j + b_1)")
    s = unit_scores(a, w2, b2)
    record("scores", "a_j = W_2 PReLU(W_1 x_j + b_1) + b_2", s, latex=r"a_j = W_2\, \mathrm{PReLU}(W_1 x_j + b_1) + b_2")
    return s


def _check(candidate: torch.Tensor, history: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor | None,
           prelu: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor | None, mask: torch.Tensor | None,
           normalise: str) -> None:
    _checks.floating(("candidate", "history"), (candidate, history))
    if normalise not in NORMALISE:
        raise ValueError(f"normalise must be one of {NORMALISE}; got {normalise!r}")
    if history.dim() != candidate.dim() + 1 or candidate.dim() not in (1, 2) \
            or history.shape[:-2] != candidate.shape[:-1] or history.shape[-1] != candidate.shape[-1]:
        raise ValueError(f"candidate must be (d,) or (b, d) and history (n, d) or (b, n, d) with the same d and b; "
                         f"got candidate {_checks.shape(candidate)}, history {_checks.shape(history)}")
    d = candidate.shape[-1]
    if w1.dim() != 2 or w1.shape[1] != 4 * d:
        raise ValueError(f"w1 must be (h, 4d) = (·, {4 * d}); got {_checks.shape(w1)}")
    _checks.param("w2", w2, (1, w1.shape[0]), "the activation unit's output layer, (1, h)")
    if prelu.numel() != 1 and tuple(prelu.shape) != (w1.shape[0],):
        raise ValueError(f"prelu must be one slope or one per hidden unit ({w1.shape[0]},); got {_checks.shape(prelu)}")
    if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != tuple(history.shape[:-1])):
        raise ValueError(f"mask must be a {tuple(history.shape[:-1])} bool tensor, True = a real item; "
                         f"got {_checks.shape(mask)} {mask.dtype}")
    named = {"candidate": candidate, "history": history, "w1": w1, "b1": b1, "prelu": prelu, "w2": w2, "b2": b2}
    given = {n: t for n, t in named.items() if t is not None}
    _checks.floating(tuple(given), tuple(given.values()))  # the parameters too: one dtype (or autocast)


def target_attention(
    candidate: torch.Tensor,
    history: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor | None,
    prelu: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor | None,
    *,
    mask: torch.Tensor | None = None,
    normalise: str = "softmax",
) -> tuple[torch.Tensor, torch.Tensor]:
    """DIN's target attention → (context (b, d) or (d,), weights (b, n) or (n,)); see the module's docstring."""
    _check(candidate, history, w1, b1, prelu, w2, b2, mask, normalise)
    single = candidate.dim() == 1
    if single:
        candidate, history = candidate[None], history[None]
        mask = None if mask is None else mask[None]
    if normalise == "softmax":  # through the core: its masked softmax and non-finite rule
        context, w = attention(candidate.unsqueeze(1), history, history,
                               score=lambda q, k: _activation_unit(q, k, w1, b1, prelu, w2, b2).unsqueeze(-2),
                               mask=None if mask is None else mask.unsqueeze(1), need_weights=True)
        assert w is not None  # need_weights=True
        context, w = context.squeeze(1), w.squeeze(1)  # (b, d), (b, n)
    else:  # DIN's sum pooling: padded rows are zeros before any arithmetic
        if mask is not None:
            history = torch.where(mask.unsqueeze(-1), history, torch.zeros((), dtype=history.dtype, device=history.device))
        w = sum_pool_weights(_activation_unit(candidate.unsqueeze(1), history, w1, b1, prelu, w2, b2), mask)
        record("weights", "w_j = a_j (no softmax; 0 at padded items)", w, latex=r"w_j = a_j")
        context = sum_pool(w, history)
        record("context", "v_U = Σ_j w_j e_j", context, latex=r"v_U = \sum_j w_j e_j")
    return (context[0], w[0]) if single else (context, w)


__all__ = ["target_attention", "din_features", "unit_hidden", "unit_activation", "unit_scores",
           "sum_pool_weights", "sum_pool", "NORMALISE"]
