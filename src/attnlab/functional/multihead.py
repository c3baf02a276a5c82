"""Multi-head (and grouped-query) attention as a pure function.

Vaswani et al. 2017, "Attention Is All You Need", §3.2.2, https://arxiv.org/abs/1706.03762;
grouped-query heads: Ainslie et al. 2023, https://arxiv.org/abs/2305.13245.

    Q = X_q W_qᵀ,  K = X_k W_kᵀ,  V = X_v W_vᵀ               (projections, Linear layout)
    Q → h heads of size d_h;  K, V → h_kv heads (h_kv divides h)  (split)
    head_i = softmax(Q_i K_gᵀ / √d_h + mask) V_g,  g = i // (h / h_kv)
    MultiHead = concat(head_1 … head_h) W_oᵀ                     (concat, output projection)

| paper            | argument                  |
|------------------|---------------------------|
| W^Q, W^K, W^V    | ``w_q``, ``w_k``, ``w_v`` (``(h·d_h, d_q)``, ``(h_kv·d_h, d_k)``, ``(h_kv·d_h, d_v)``) |
| W^O              | ``w_o`` (``(d_out, h·d_h)``) |
| h                | ``num_heads``             |
| d_k = d_model/h  | ``head_dim`` (derived)    |

Shapes: query (b, q, d_q), key (b, k, d_k), value (b, k, d_v) → output (b, q, d_out),
weights (b, h, q, k). The per-head attention is ``attnlab.attention`` on
(b, h, q, d_h), so masks broadcast against (b, h, q, k) and every contract of
the core holds. While a trace is active the steps are recorded:
``projected_query``, ``projected_keys``, ``projected_values``, then the core's
``scores``/``scaled_scores``/``masked_scores``/``weights``/``context`` of all
heads at once (b, h, q, ·), then ``heads`` (the concatenation) and ``output``.

The paper's steps are small named functions (``project``, ``split_heads``,
``repeat_kv``, ``attnlab.attention``, ``merge_heads``, ``output_projection``);
``attnlab.nn.MultiHeadAttention`` composes the same functions with what the
paper does not have (the packed projection, key/value caches, rotary and ALiBi
positions, memory caches, the sparse-pattern dispatch to the kernels).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _checks, masks
from ..trace import record
from .attention import attention

_PROJECTED = {
    "query": ("projected_query", "Q = X W_qᵀ", r"Q = X W_q^\top"),
    "keys": ("projected_keys", "K = X W_kᵀ", r"K = X W_k^\top"),
    "values": ("projected_values", "V = X W_vᵀ", r"V = X W_v^\top"),
}


def project(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, what: str) -> torch.Tensor:
    """Step: X Wᵀ + b, recorded as ``projected_{what}`` (what: query, keys, values).  (b, n, d) → (b, n, out)."""
    y = F.linear(x, weight, bias)
    name, formula, latex = _PROJECTED[what]
    record(name, formula, y, latex=latex)
    return y


def project_packed(
    x: torch.Tensor, w_qkv: torch.Tensor, b_qkv: torch.Tensor | None, sizes: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step: [Q; K; V] = X W_qkvᵀ + b in one matmul (self-attention), recorded as the three projections.

    (b, n, d) → three views (b, n, sizes[i]) of one (b, n, Σ sizes) tensor.
    """
    q, k, v = F.linear(x, w_qkv, b_qkv).split(list(sizes), dim=-1)
    for what, y in (("query", q), ("keys", k), ("values", v)):
        name, formula, latex = _PROJECTED[what]
        record(name, formula, y, latex=latex)
    return q, k, v


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(b, n, h·d_h) → (b, h, n, d_h)."""
    b, n, d = x.shape
    return x.view(b, n, num_heads, d // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Step: concat(head_1 … head_h), recorded as ``heads``.  (b, h, n, d_h) → (b, n, h·d_h)."""
    b, h, n, d = x.shape
    heads = x.transpose(1, 2).reshape(b, n, h * d)
    record("heads", "concat(head_1, …, head_h)", heads, latex=r"\mathrm{concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)")
    return heads


def output_projection(heads: torch.Tensor, w_o: torch.Tensor, b_o: torch.Tensor | None) -> torch.Tensor:
    """Step: concat(heads) W_oᵀ + b_o, recorded as ``output``.  (b, q, h·d_h) → (b, q, d_out)."""
    out = F.linear(heads, w_o, b_o)
    record("output", "MultiHead = concat(heads) W_oᵀ", out, latex=r"\mathrm{MultiHead} = \mathrm{concat}(\cdot)\, W_o^\top")
    return out


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(b, h_kv, n, d_h) → (b, h_kv·groups, n, d_h): each key/value head serves ``groups`` query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def check_heads(num_heads: int, num_kv_heads: int, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> int:
    """num_kv_heads divides num_heads, the projections' output sizes fit; returns head_dim."""
    if num_heads < 1 or num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads must divide num_heads (both >= 1); got num_heads={num_heads}, num_kv_heads={num_kv_heads}"
        )
    if w_q.shape[0] < 1 or w_q.shape[0] % num_heads:
        raise ValueError(
            f"w_q's output features must be a positive multiple of num_heads={num_heads}; got {_checks.shape(w_q)}"
        )
    head_dim = w_q.shape[0] // num_heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape[0] != num_kv_heads * head_dim:
            raise ValueError(
                f"{name} must have num_kv_heads·head_dim = {num_kv_heads}·{head_dim} = "
                f"{num_kv_heads * head_dim} output features; got shape {_checks.shape(w)}"
            )
    return head_dim


def check_inputs(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """query (b, q, d_q), key (b, k, d_k), value (b, k, d_v), floating, one dtype."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _checks.tensor(name, t).dim() != 3:
            raise ValueError(f"{name} must be (b, n, d); got shape {_checks.shape(t)}")
    _checks.floating(("query", "key", "value"), (query, key, value))
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(f"key and value must share (b, k); got key {_checks.shape(key)}, value {_checks.shape(value)}")
    if query.shape[0] != key.shape[0]:
        raise ValueError(f"query and key batch sizes differ: query {_checks.shape(query)}, key {_checks.shape(key)}")


def zero_unreachable(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the key/value inputs (b, k, d) at positions that no query of any head may attend.

    mask: bool or float, broadcastable to (b, h, q, k). ``torch.where`` (not a multiplication),
    so NaN or inf there never enters a projection, its output, or any gradient (W_k's included).
    """
    if mask is None:
        return x
    allowed = masks.allowed(mask)
    if allowed.dim() < 4:
        allowed = allowed.reshape((1,) * (4 - allowed.dim()) + tuple(allowed.shape))
    reach = allowed.any(dim=2).any(dim=1)  # (b|1, k)
    return torch.where(reach.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    num_heads: int,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    w_o: torch.Tensor,
    b_q: torch.Tensor | None = None,
    b_k: torch.Tensor | None = None,
    b_v: torch.Tensor | None = None,
    b_o: torch.Tensor | None = None,
    num_kv_heads: int | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multi-head attention from ``query`` to ``key``/``value`` (self-attention: pass x three times).

    mask: bool (True = may attend) or float bias, broadcastable to (b, h, q, k), read by
    ``attnlab.masks.score_mask``: (k,) for every query; a 2-D (b, k) padding mask as
    (b, 1, 1, k) and a (q, k) mask as (1, 1, q, k) (when b = q the shape is ambiguous and
    raises ``ValueError``: pass (b, 1, 1, k) or (1, 1, q, k)); (b, q, k) as (b, 1, q, k).
    Returns ``(output (b, q, d_out), weights (b, h, q, k) or None)``.
    """
    check_inputs(query, key, value)
    h_kv = num_heads if num_kv_heads is None else num_kv_heads
    for name, w, x in (("w_q", w_q, query), ("w_k", w_k, key), ("w_v", w_v, value)):
        if _checks.tensor(name, w).dim() != 2 or w.shape[1] != x.shape[-1]:
            raise ValueError(f"{name} must be (out, {x.shape[-1]}) to act on inputs of size {x.shape[-1]}; got {_checks.shape(w)}")
    check_heads(num_heads, h_kv, w_q, w_k, w_v)
    if _checks.tensor("w_o", w_o).dim() != 2 or w_o.shape[1] != w_q.shape[0]:
        raise ValueError(f"w_o must be (d_out, {w_q.shape[0]}); got {_checks.shape(w_o)}")
    params = {n: t for n, t in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o), ("b_q", b_q), ("b_k", b_k),
                                ("b_v", b_v), ("b_o", b_o)) if t is not None}
    _checks.floating(("query", *params), (query, *params.values()))  # one dtype (several under autocast)
    mask = masks.score_mask(mask, query.shape[0], query.shape[1], key.shape[1])[0]
    if mask is not None:
        # a float bias must have the scores' dtype: the query's, or under autocast the heads' (checked by attention)
        dtype = None if _checks.autocasting(query) else query.dtype
        _checks.mask(mask, (query.shape[0], num_heads, query.shape[1], key.shape[1]), dtype)
        key, value = zero_unreachable(key, mask), zero_unreachable(value, mask)
    qh = split_heads(project(query, w_q, b_q, "query"), num_heads)  # (b, h, q, d_h)
    kh = split_heads(project(key, w_k, b_k, "keys"), h_kv)  # (b, h_kv, k, d_h)
    vh = split_heads(project(value, w_v, b_v, "values"), h_kv)  # (b, h_kv, k, d_h)
    groups = num_heads // h_kv
    kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)  # (b, h, k, d_h)
    ctx, weights = attention(
        qh, kh, vh, mask=mask, causal=causal, scale=scale, dropout_p=dropout_p, need_weights=need_weights
    )  # (b, h, q, d_h), (b, h, q, k)
    return output_projection(merge_heads(ctx), w_o, b_o), weights


__all__ = [
    "multi_head_attention",
    "project",
    "project_packed",
    "split_heads",
    "merge_heads",
    "repeat_kv",
    "output_projection",
    "check_heads",
    "check_inputs",
    "zero_unreachable",
]
