"""Score functions: how well a query matches each key.

Every function maps a query ``q`` of shape ``(..., q, d_q)`` and keys ``k`` of
shape ``(..., k, d_k)`` to scores ``(..., q, k)``; leading dimensions broadcast.
Parameters follow ``torch.nn.Linear`` layout, so the formula's ``W x`` is
``x @ W.T`` here.

| score        | formula                          | papers                          |
|--------------|----------------------------------|---------------------------------|
| ``dot``        | e = qᵀ k                         | Luong et al. 2015 ("dot")      |
| ``scaled_dot`` | e = qᵀ k / √d                    | Vaswani et al. 2017            |
| ``general``    | e = qᵀ W k                       | Luong et al. 2015 ("general")  |
| ``additive``   | e = vᵀ tanh(W_q q + W_k k)       | Bahdanau et al. 2015           |
| ``concat``     | e = vᵀ tanh(W [q; k])            | Luong et al. 2015 ("concat")   |

Symbols of the tutorials → arguments: the decoder state s_t is ``q``, the encoder
states h_i are the rows of ``k``; Bahdanau's W_1 (or W_s) is ``w_q``, W_2 (or
W_h) is ``w_k``, and v is ``v``.

The additive and concat scores build a ``(..., q, k, d_a)`` tensor here, which
is the readable reference. ``attnlab.nn.AdditiveAttention`` uses a chunked
kernel for long inputs.

While a trace is active (``attnlab.trace()``), each function records its named
intermediate steps.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import _checks
from ..trace import active, record


def _inputs(q: object, k: object, **params: object) -> None:
    """query (..., q, d_q) and key (..., k, d_k): tensors whose batch dimensions broadcast; they and the
    parameters floating point and of one dtype (mixed dtypes allowed under autocast)."""
    _checks.tensor("query", q, 2), _checks.tensor("key", k, 2)
    for name, t in params.items():
        _checks.tensor(name, t, 1)
    _checks.floating(("query", "key", *params), (q, k, *params.values()))  # type: ignore[arg-type]
    _checks.leading_broadcast(("query", "key"), (q, k))  # type: ignore[arg-type]


def dot(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """e_ij = q_iᵀ k_j.  q (..., q, d), k (..., k, d) → (..., q, k)."""
    _inputs(q, k)
    _checks.features("query", q)
    _checks.features("key", k)
    _checks.features_match("the dot score", q, k)
    scores = q @ k.transpose(-2, -1)
    record("scores", "e_ij = q_iᵀ k_j", scores, latex=r"e_{ij} = q_i^\top k_j")
    return scores


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Step: W x for each row: x (..., n, d_in), weight (d_out, d_in) → (..., n, d_out)."""
    return F.linear(x, weight, bias)


def pair_sum(wq: torch.Tensor, wk: torch.Tensor) -> torch.Tensor:
    """Step: W_q q_i + W_k k_j for every pair: (..., q, d_a), (..., k, d_a) → (..., q, k, d_a)."""
    return wq.unsqueeze(-2) + wk.unsqueeze(-3)


def vector_scores(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Step: e_ij = vᵀ u_ij: u (..., q, k, d_a), v (d_a,) → (..., q, k)."""
    return u @ v


def scale_scores(e: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """Step: e · s."""
    return e * scale


def default_scale(d: int) -> float:
    """The scaled dot product's default factor 1/√d (Vaswani et al. 2017), for d >= 1 features:
    the one definition that every mechanism, kernel and module uses."""
    return 1.0 / math.sqrt(d)


def scaled_dot(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """e_ij = q_iᵀ k_j · scale, scale = 1/√d by default.  q (..., q, d), k (..., k, d) → (..., q, k)."""
    s = None if scale is None else _checks.scale(scale)
    scores = dot(q, k)
    s = default_scale(q.shape[-1]) if s is None else s
    scaled = scale_scores(scores, s)
    record(
        "scaled_scores",
        f"e_ij = q_iᵀ k_j · {s:.6g}" + ("  (= 1/√d)" if scale is None else ""),
        scaled,
        latex=r"e_{ij} = \frac{q_i^\top k_j}{\sqrt{d}}" if scale is None else rf"e_{{ij}} = {s:.6g}\, q_i^\top k_j",
    )
    return scaled


def general(q: torch.Tensor, k: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """e_ij = q_iᵀ W k_j with ``weight`` W of shape (d_q, d_k).  → (..., q, k)."""
    _checks.tensor("query", q, 2), _checks.tensor("key", k, 2)
    _checks.param("weight", weight, (q.shape[-1], k.shape[-1]), "W of the general score, (d_q, d_k)")
    _inputs(q, k, weight=weight)
    wk = project(k, weight)  # (..., k, d_q)
    record("projected_keys", "W k_j", wk, latex=r"W k_j")
    scores = q @ wk.transpose(-2, -1)
    record("scores", "e_ij = q_iᵀ W k_j", scores, latex=r"e_{ij} = q_i^\top W k_j")
    return scores


def _additive(
    q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, v: torch.Tensor, what: str
) -> torch.Tensor:
    wq = project(q, w_q)  # (..., q, d_a)
    wk = project(k, w_k)  # (..., k, d_a)
    record("projected_query", "W_q q_i", wq, latex=r"W_q q_i")
    record("projected_keys", "W_k k_j", wk, latex=r"W_k k_j")
    pre = pair_sum(wq, wk)  # (..., q, k, d_a)
    if active():
        record("preactivation", "W_q q_i + W_k k_j", pre, latex=r"W_q q_i + W_k k_j")
    u = torch.tanh(pre)
    record("tanh", "u_ij = tanh(W_q q_i + W_k k_j)", u, latex=r"u_{ij} = \tanh(W_q q_i + W_k k_j)")
    scores = vector_scores(u, v)  # (..., q, k)
    record("scores", f"e_ij = vᵀ u_ij  ({what})", scores, latex=r"e_{ij} = v^\top u_{ij}")
    return scores


def additive(
    q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """Bahdanau: e_ij = vᵀ tanh(W_q q_i + W_k k_j).

    w_q (d_a, d_q), w_k (d_a, d_k), v (d_a,).  q (..., q, d_q), k (..., k, d_k) → (..., q, k).
    """
    _inputs(q, k, w_q=w_q, w_k=w_k, v=v)
    # d_a from the two that agree, so that the odd one out is the one reported
    if v.dim() == 1 and w_k.shape[0] == v.shape[0] != w_q.shape[0]:
        d_a = v.shape[0]
    else:
        d_a = w_q.shape[0]
    _checks.param("w_q", w_q, (d_a, q.shape[-1]), "W_q of the additive score, (d_a, d_q)")
    _checks.param("w_k", w_k, (d_a, k.shape[-1]), "W_k of the additive score, (d_a, d_k)")
    _checks.param("v", v, (d_a,), "the additive score's vector v, (d_a,) with d_a = W_q's rows")
    return _additive(q, k, w_q, w_k, v, "additive")


def concat(q: torch.Tensor, k: torch.Tensor, weight: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Luong concat: e_ij = vᵀ tanh(W [q_i; k_j]), ``weight`` W of shape (d_a, d_q + d_k), v (d_a,).

    Since W [q; k] = W[:, :d_q] q + W[:, d_q:] k, this is the additive score with
    W split into its query and key columns.
    """
    _checks.tensor("query", q, 2), _checks.tensor("key", k, 2)
    _checks.tensor("v", v, 1)
    d_a, d_q, d_k = v.shape[0], q.shape[-1], k.shape[-1]
    _checks.param("v", v, (d_a,), "the concat score's vector v, (d_a,)")
    _checks.param("weight", weight, (d_a, d_q + d_k), "W of the concat score, (d_a, d_q + d_k)")
    _inputs(q, k, weight=weight, v=v)
    return _additive(q, k, weight[:, :d_q], weight[:, d_q:], v, "concat: W [q; k] = W_q q + W_k k")


SCORES = {"dot": dot, "scaled_dot": scaled_dot, "general": general, "additive": additive, "concat": concat}

__all__ = ["dot", "scaled_dot", "general", "additive", "concat", "default_scale", "SCORES", "project", "pair_sum",
           "vector_scores", "scale_scores"]
