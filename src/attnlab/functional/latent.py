"""Multi-head latent attention (DeepSeek-V2): keys and values from one small cached latent vector.

DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
Model", 2024, §2.1, https://arxiv.org/abs/2405.04434, eqs. 9–19:

    c_t^KV = W^DKV h_t                                   (d_c)        the cached latent   (eq. 9)
    k_t^C  = W^UK c_t^KV,   v_t^C = W^UV c_t^KV          (h · d_h)    up-projections      (eqs. 10–11)
    c_t^Q  = W^DQ h_t,      q_t^C = W^UQ c_t^Q           (h · d_h)    query compression   (eqs. 12–13)
    q_t^R  = RoPE(W^QR c_t^Q)  (h · d_R),   k_t^R = RoPE(W^KR h_t)  (d_R, shared by the heads,
                                                                      cached)  the decoupled rotary part (eqs. 14–15)
    q_t,i = [q_t,i^C; q_t^R,i],   k_j,i = [k_j,i^C; k_j^R]                                (eqs. 16–17)
    o_t,i = Σ_j softmax_j(q_t,iᵀ k_j,i / √(d_h + d_R)) v_j,i^C,   u_t = W^O [o_t,1; …; o_t,h]  (eqs. 18–19)

The cache holds c^KV and k^R: (d_c + d_R) numbers per token and layer, against 2·h·d_h for
multi-head and 2·h_kv·d_h for grouped-query attention. The rotary part is decoupled because
RoPE between W^UK and the query would stop W^UK from being absorbed into W^Q at inference.

This function is eqs. 10–11 and 16–18 (the attention, through the one core
``attnlab.attention``); the module ``attnlab.nn.MultiHeadLatentAttention`` does the
projections, norms, RoPE, cache and W^O.

| paper            | argument                                   |
|------------------|--------------------------------------------|
| q^C, q^R         | ``q_content`` (b, h, q, d_h), ``q_rope`` (b, h, q, d_R) |
| c^KV, k^R        | ``c_kv`` (b, k, d_c), ``k_rope`` (b, k, d_R) |
| W^UK, W^UV       | ``w_uk`` (h·d_h, d_c), ``w_uv`` (h·d_v, d_c) |
| h                | ``num_heads``                              |

Returns the heads' outputs (b, h, q, d_v) and the weights (b, h, q, k) on request. Masks and
the causal flag as in ``attnlab.attention``, whose non-finite rule reaches back to the latents:
with a mask (or ``causal``) a latent holding NaN or inf at a forbidden position influences no
output and no gradient, W^UK's and W^UV's included. Caveat: the keys and values are up-projected
from the latents at every call (the readable form); the "absorbed" form that multiplies W^UK
into the query is an inference optimisation left out.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import _checks
from ..trace import record
from .attention import attention
from .multihead import split_heads
from .nonfinite import map_finite_rows


def latent_attention(
    q_content: torch.Tensor,
    q_rope: torch.Tensor,
    c_kv: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    *,
    num_heads: int,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Attention with keys [W^UK c^KV; k^R] and values W^UV c^KV: ``(heads (b, h, q, d_v), weights or None)``."""
    for name, t, dims in (("q_content", q_content, 4), ("q_rope", q_rope, 4), ("c_kv", c_kv, 3), ("k_rope", k_rope, 3)):
        if _checks.tensor(name, t).dim() != dims:
            raise ValueError(f"{name} must have {dims} dimensions; got shape {_checks.shape(t)}")
    _checks.floating(("q_content", "q_rope", "c_kv", "k_rope", "w_uk", "w_uv"),
                     (q_content, q_rope, c_kv, k_rope, _checks.tensor("w_uk", w_uk, 2), _checks.tensor("w_uv", w_uv, 2)))
    d_c = c_kv.shape[-1]
    if w_uk.shape[1] != d_c or w_uv.shape[1] != d_c or w_uk.shape[0] % num_heads or w_uv.shape[0] % num_heads:
        raise ValueError(
            f"w_uk (h·d_h, d_c) and w_uv (h·d_v, d_c) must act on latents of d_c={d_c} with h={num_heads}; "
            f"got w_uk {_checks.shape(w_uk)}, w_uv {_checks.shape(w_uv)}"
        )
    if c_kv.shape[:2] != k_rope.shape[:2] or q_content.shape[:3] != q_rope.shape[:3]:
        raise ValueError(
            f"c_kv (b, k, d_c) and k_rope (b, k, d_R) must share (b, k), q_content and q_rope (b, h, q) ; got "
            f"{_checks.shape(c_kv)}, {_checks.shape(k_rope)}, {_checks.shape(q_content)}, {_checks.shape(q_rope)}"
        )
    guard = mask is not None or causal  # the core's non-finite rule: a NaN latent never reaches W^UK's gradient
    k_content = up_project(c_kv, w_uk, num_heads, guard)  # (b, h, k, d_h)
    record("content_keys", "k_j^C = W^UK c_j^KV", k_content, latex=r"k_j^C = W^{UK} c_j^{KV}")
    value = up_project(c_kv, w_uv, num_heads, guard)  # (b, h, k, d_v)
    record("value_heads", "v_j^C = W^UV c_j^KV", value, latex=r"v_j^C = W^{UV} c_j^{KV}")
    query = join_rope(q_content, q_rope)  # (b, h, q, d_h + d_R)
    record("query_heads", "q_i = [q_i^C; q_i^R]", query, latex=r"q_i = [q_i^C; q_i^R]")
    key = join_rope(k_content, k_rope)  # (b, h, k, d_h + d_R)
    record("key_heads", "k_j = [k_j^C; k_j^R]", key, latex=r"k_j = [k_j^C; k_j^R]")
    return attention(query, key, value, mask=mask, causal=causal, dropout_p=dropout_p, need_weights=need_weights)


def up_project(c_kv: torch.Tensor, weight: torch.Tensor, num_heads: int, guard: bool = False) -> torch.Tensor:
    """Step: W^U c^KV split into heads (eqs. 10–11).  c_kv (b, k, d_c), weight (h·d, d_c) → (b, h, k, d).

    ``guard``: a latent holding a NaN or inf gives an all-NaN row without entering the product
    (``map_finite_rows``), so the core's non-finite rule applies to it and W^U's gradient stays finite
    wherever the mask forbids it."""
    if guard:
        return split_heads(map_finite_rows(lambda c: F.linear(c, weight), c_kv), num_heads)
    return split_heads(F.linear(c_kv, weight), num_heads)


def join_rope(content: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Step: [x^C; x^R] per head (eqs. 16–17).  content (b, h, n, d_h); rope (b, h, n, d_R) or, shared by
    the heads (the rotary key), (b, n, d_R) → (b, h, n, d_h + d_R)."""
    if rope.dim() == 3:
        rope = rope.unsqueeze(1).expand(-1, content.shape[1], -1, -1)  # one rotary key for all heads
    return torch.cat([content, rope], -1)

__all__ = ["latent_attention", "up_project", "join_rope"]
