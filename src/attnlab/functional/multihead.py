"""Multi-head (and grouped-query) attention as a pure function.

Vaswani et al. 2017, "Attention Is All You Need", §3.2.2, https://arxiv.org/abs/1706.03762;
grouped-query heads: Ainslie et al. 2023, https://arxiv.org/abs/2305.13245.

    Q = X_q W_qᵀ,  K = X_k W_kᵀ,  V = X_v W_vᵀ               (projections, Linear layout)
    Q → h heads of size d_h;  K, V → h_kv heads (h_kv divides h)  (split)
    head_i = softmax(Q_i K_gᵀ / √d_h + mask) V_g,  g = i // (h / h_kv)
    MultiHead = concat(head_1 … head_h) W_oᵀ                     (concat, output projection)

| paper            | argument                  |
|------------------|---------------------------|
| W^Q, W^K, W^V    | ``weights["w_q"]``, ``["w_k"]``, ``["w_v"]`` (``(h·d_h, d_q)``, ``(h_kv·d_h, d_k)``, ``(h_kv·d_h, d_v)``) |
| W^O              | ``weights["w_o"]`` (``(d_out, h·d_h)``); biases ``b_q``, ``b_k``, ``b_v``, ``b_o`` optional |
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

from collections.abc import Mapping
from typing import TypedDict

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


# Padding in self-attention: a (b, n) padding mask marks padded *queries* too. The one rule of
# ``multi_head_attention`` and of the self-attention modules that project their own queries, keys and
# values (``MultiHeadAttention``, linear, differential, latent attention): the input rows of padded
# tokens are zeroed with ``torch.where`` before any projection, so NaN or inf there never reaches an
# output or a gradient, and the outputs (and weights) of padded tokens are zero.


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


class _Weights(TypedDict):
    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor


class ProjectionWeights(_Weights, total=False):
    """The projections of ``multi_head_attention`` (``MultiHeadAttention.projection_weights()``), Linear layout:
    W_q (h·d_h, d_q), W_k (h_kv·d_h, d_k), W_v (h_kv·d_h, d_v), W_o (d_out, h·d_h) required; the biases
    b_q, b_k, b_v, b_o optional (absent or None: no bias)."""

    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None
    b_o: torch.Tensor | None


WEIGHT_KEYS = ("w_q", "w_k", "w_v", "w_o")
BIAS_KEYS = ("b_q", "b_k", "b_v", "b_o")
_NEW_FORM = "multi_head_attention(query, key, value, {'w_q': ..., 'w_k': ..., 'w_v': ..., 'w_o': ...}, num_heads=h)"


def check_weights(weights: object, old_form: dict[str, object] | None = None) -> dict[str, torch.Tensor]:
    """The projections checked: a mapping with the keys w_q, w_k, w_v, w_o and optionally b_q, b_k, b_v, b_o
    (``ProjectionWeights``), each a tensor; returns them (None biases left out).

    ``old_form``: projections passed as keyword arguments (``w_q=...``, the form before the dict), refused
    with ``TypeError`` naming the form to use."""
    if old_form:
        raise TypeError(f"multi_head_attention takes the projections as one dict (ProjectionWeights): {_NEW_FORM}; "
                        f"got keyword arguments {', '.join(sorted(old_form))}")
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a dict of the projections (ProjectionWeights): {_NEW_FORM}; "
                        f"got {type(weights).__name__}")
    missing = [n for n in WEIGHT_KEYS if n not in weights]
    unknown = sorted(str(n) for n in weights if n not in WEIGHT_KEYS + BIAS_KEYS)
    if missing or unknown:
        raise ValueError(
            f"weights must have the keys {', '.join(WEIGHT_KEYS)} and optionally {', '.join(BIAS_KEYS)}; "
            f"got keys {', '.join(map(str, weights)) or 'none'}"
            + (f"; missing: {', '.join(missing)}" if missing else "") + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return {n: _checks.tensor(n, weights[n]) for n in WEIGHT_KEYS + BIAS_KEYS if weights.get(n) is not None}


def check_projections(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, p: dict[str, torch.Tensor],
                      num_heads: int, num_kv_heads: int) -> None:
    """The projections ``p`` (from ``check_weights``) fit the inputs and the heads, and share their dtype."""
    for name, x in (("w_q", query), ("w_k", key), ("w_v", value)):
        if p[name].dim() != 2 or p[name].shape[1] != x.shape[-1]:
            raise ValueError(f"{name} must be (out, {x.shape[-1]}) to act on inputs of size {x.shape[-1]}; "
                             f"got {_checks.shape(p[name])}")
    check_heads(num_heads, num_kv_heads, p["w_q"], p["w_k"], p["w_v"])
    if p["w_o"].dim() != 2 or p["w_o"].shape[1] != p["w_q"].shape[0]:
        raise ValueError(f"w_o must be (d_out, {p['w_q'].shape[0]}); got {_checks.shape(p['w_o'])}")
    _checks.floating(("query", *p), (query, *p.values()))  # one dtype (several under autocast)


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    weights: ProjectionWeights | None = None,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    **old_form: object,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multi-head attention from ``query`` to ``key``/``value`` (self-attention: pass x three times).

    weights: the projections as one dict (``ProjectionWeights``): ``w_q``, ``w_k``, ``w_v``, ``w_o``
    required, ``b_q``, ``b_k``, ``b_v``, ``b_o`` optional; a missing or unknown key raises ``ValueError``.
    ``MultiHeadAttention.projection_weights()`` gives a module's:
    ``multi_head_attention(x, x, x, m.projection_weights(), num_heads=m.num_heads)`` is ``m(x)``.
    mask: bool (True = may attend) or float bias, broadcastable to (b, h, q, k), read by
    ``attnlab.masks.score_mask``: (k,) for every query; a 2-D (b, k) padding mask as
    (b, 1, 1, k) and a (q, k) mask as (1, 1, q, k) (when b = q the shape is ambiguous and
    raises ``ValueError``: pass (b, 1, 1, k) or (1, 1, q, k)); (b, q, k) as (b, 1, q, k).
    Self-attention (``query``, ``key`` and ``value`` the same tensor) with a (b, n) or bool (b, 1, 1, n)
    padding mask: the padded tokens are padded queries too, their outputs and weights are zeros
    (``padded_queries``, ``zero_padded``: the rule ``attnlab.nn.MultiHeadAttention`` follows too).
    Returns ``(output (b, q, d_out), weights (b, h, q, k) or None)``.
    """
    p = check_weights(weights, old_form)
    check_inputs(query, key, value)
    h_kv = num_heads if num_kv_heads is None else num_kv_heads
    check_projections(query, key, value, p, num_heads, h_kv)
    mask, padding = masks.score_mask(mask, query.shape[0], query.shape[1], key.shape[1])
    pad_q = None  # (b, q) True = a real query token, in self-attention with a (b, n) padding mask
    if key is query and value is query:
        query, pad_q = padded_queries(query, mask, padding)
        key = value = query
    if mask is not None:
        # a float bias must have the scores' dtype: the query's, or under autocast the heads' (checked by attention)
        dtype = None if _checks.autocasting(query) else query.dtype
        _checks.mask(mask, (query.shape[0], num_heads, query.shape[1], key.shape[1]), dtype)
        key, value = zero_unreachable(key, mask), zero_unreachable(value, mask)
    qh = split_heads(project(query, p["w_q"], p.get("b_q"), "query"), num_heads)  # (b, h, q, d_h)
    kh = split_heads(project(key, p["w_k"], p.get("b_k"), "keys"), h_kv)  # (b, h_kv, k, d_h)
    vh = split_heads(project(value, p["w_v"], p.get("b_v"), "values"), h_kv)  # (b, h_kv, k, d_h)
    groups = num_heads // h_kv
    kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)  # (b, h, k, d_h)
    ctx, attn = attention(
        qh, kh, vh, mask=mask, causal=causal, scale=scale, dropout_p=dropout_p, need_weights=need_weights
    )  # (b, h, q, d_h), (b, h, q, k)
    out = output_projection(merge_heads(ctx), p["w_o"], p.get("b_o"))  # (b, q, d_out)
    return zero_padded(out, attn, pad_q)  # padded queries: zero output (and zero weights)


__all__ = [
    "multi_head_attention",
    "ProjectionWeights",
    "check_weights",
    "check_projections",
    "project",
    "project_packed",
    "split_heads",
    "merge_heads",
    "repeat_kv",
    "output_projection",
    "check_heads",
    "check_inputs",
    "zero_unreachable",
    "padded_queries",
    "zero_padded",
]
