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

Extensions used by ``attnlab.nn.MultiHeadAttention`` (all optional):

* ``w_qkv``/``b_qkv``: one packed projection ``(h·d_h + 2·h_kv·d_h, d)`` for
  self-attention (one matmul instead of three, as ``torch.nn.MultiheadAttention``
  does); then ``w_q``/``w_k``/``w_v`` are not given and ``key``/``value`` must be ``query``.
* ``rotary``: a callable ``(x (b, h, n, d_h), offset) -> x`` (``attnlab.nn.RotaryEmbedding``)
  applied to the query and key heads after the split, at positions ``offset + i``.
* ``cache``: an ``attnlab.nn.LayerCache``; the new key/value heads (after the rotary
  embedding, before they are repeated for grouped-query heads) are appended and
  the queries attend over everything cached. With ``causal=True`` the core's causal
  mask is aligned bottom-right, so the new queries see all cached keys.
* ``memory_cache``: an ``attnlab.nn.MemoryCache`` for cross-attention: the key and value
  heads of ``key``/``value`` are projected once and reused while the same tensors come back
  (incremental decoding over a fixed memory).
* ``attn_bias``: a float bias (ALiBi), a tensor broadcastable to (b, h, q, k) or a
  callable ``(q_len, k_len) -> (h, q, k)`` evaluated after the cache update; it is
  added to the scores together with ``mask``.
* ``pattern``: an ``attnlab.patterns`` pattern (a sliding window, Longformer, BigBird, …)
  for self-attention: the heads go through ``attnlab.kernels.block_sparse_attention``,
  which computes only the ``block`` × ``block`` tiles the pattern touches (O(n·w) for a
  window), forward and backward. ``mask`` is then a bool padding mask (b, n) (True = real
  token), ``causal=True`` intersects the pattern with ``causal()``, and ``need_weights``
  returns the dense (b, h, n, n) weights (n² memory: for small n and pictures). Not with
  a cache or ``attn_bias``; no trace steps are recorded inside the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import _checks, masks, patterns
from ..kernels.block_sparse import block_sparse_attention, weights_for_rows
from ..trace import active, record
from .attention import attention


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(b, n, h·d_h) → (b, h, n, d_h)."""
    b, n, d = x.shape
    return x.view(b, n, num_heads, d // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, h, n, d_h) → (b, n, h·d_h)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(b, h_kv, n, d_h) → (b, h_kv·groups, n, d_h): each key/value head serves ``groups`` query heads."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _check_heads(num_heads: int, num_kv_heads: int, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> int:
    if num_heads < 1 or num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads must divide num_heads (both >= 1); got num_heads={num_heads}, num_kv_heads={num_kv_heads}"
        )
    if w_q.shape[0] % num_heads:
        raise ValueError(f"w_q has {w_q.shape[0]} output features, not divisible by num_heads={num_heads}")
    head_dim = w_q.shape[0] // num_heads
    for name, w in (("w_k", w_k), ("w_v", w_v)):
        if w.shape[0] != num_kv_heads * head_dim:
            raise ValueError(
                f"{name} must have num_kv_heads·head_dim = {num_kv_heads}·{head_dim} = "
                f"{num_kv_heads * head_dim} output features; got shape {_checks.shape(w)}"
            )
    return head_dim


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    num_heads: int,
    w_q: torch.Tensor | None = None,
    w_k: torch.Tensor | None = None,
    w_v: torch.Tensor | None = None,
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
    w_qkv: torch.Tensor | None = None,
    b_qkv: torch.Tensor | None = None,
    rotary: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
    cache: Any = None,
    attn_bias: torch.Tensor | Callable[[int, int], torch.Tensor] | None = None,
    pattern: patterns.Pattern | None = None,
    block: int = 64,
    memory_cache: Any = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Multi-head attention from ``query`` to ``key``/``value`` (self-attention: pass x three times).

    mask: bool (True = may attend) or float bias, broadcastable to (b, h, q, k);
    a (b, k) padding mask is accepted and read as (b, 1, 1, k) (k counts cached keys too).
    Returns ``(output (b, q, d_out), weights (b, h, q, k) or None)``.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _checks.tensor(name, t).dim() != 3:
            raise ValueError(f"{name} must be (b, n, d); got shape {_checks.shape(t)}")
    if key.shape[:2] != value.shape[:2]:
        raise ValueError(f"key and value must share (b, k); got key {_checks.shape(key)}, value {_checks.shape(value)}")
    if query.shape[0] != key.shape[0]:
        raise ValueError(f"query and key batch sizes differ: query {_checks.shape(query)}, key {_checks.shape(key)}")
    h_kv = num_heads if num_kv_heads is None else num_kv_heads
    if w_qkv is not None:
        if not (w_q is None and w_k is None and w_v is None and b_q is None and b_k is None and b_v is None):
            raise ValueError("give either w_qkv (packed) or w_q, w_k, w_v (and their biases), not both")
        if key is not query or value is not query:
            raise ValueError("the packed projection w_qkv is for self-attention: pass the same tensor as query, key and value")
        if w_qkv.dim() != 2 or w_qkv.shape[1] != query.shape[-1] or w_qkv.shape[0] % (num_heads + 2 * h_kv):
            raise ValueError(
                f"w_qkv must be ((h + 2·h_kv)·d_h, {query.shape[-1]}) with h={num_heads}, h_kv={h_kv}; "
                f"got {_checks.shape(w_qkv)}"
            )
        if memory_cache is not None:
            raise ValueError("memory_cache is for cross-attention (separate key/value projections), not with w_qkv")
        cached = None
        d_h = w_qkv.shape[0] // (num_heads + 2 * h_kv)
        qkv = F.linear(query, w_qkv, b_qkv)  # (b, q, (h + 2·h_kv)·d_h)
        q, k, v = qkv.split([num_heads * d_h, h_kv * d_h, h_kv * d_h], dim=-1)
        inner = num_heads * d_h
    else:
        if w_q is None or w_k is None or w_v is None:
            raise ValueError("w_q, w_k and w_v are required (or one packed w_qkv for self-attention)")
        for name, w, x in (("w_q", w_q, query), ("w_k", w_k, key), ("w_v", w_v, value)):
            if w.dim() != 2 or w.shape[1] != x.shape[-1]:
                raise ValueError(f"{name} must be (out, {x.shape[-1]}) to act on inputs of size {x.shape[-1]}; got {_checks.shape(w)}")
        _check_heads(num_heads, h_kv, w_q, w_k, w_v)
        q = F.linear(query, w_q, b_q)  # (b, q, h·d_h)
        cached = None if memory_cache is None else memory_cache.lookup(key, value)
        if cached is None:
            k = F.linear(key, w_k, b_k)  # (b, k, h_kv·d_h)
            v = F.linear(value, w_v, b_v)  # (b, k, h_kv·d_h)
        else:
            k = v = None  # the memory's heads are cached
        inner = w_q.shape[0]
    if num_heads % h_kv:
        raise ValueError(f"num_kv_heads must divide num_heads; got num_heads={num_heads}, num_kv_heads={h_kv}")
    if memory_cache is not None and cache is not None:
        raise ValueError("give cache (self-attention keys that grow) or memory_cache (a fixed memory), not both")
    if pattern is not None and (cache is not None or attn_bias is not None):
        raise ValueError("a sparse pattern works without a cache and without attn_bias (ALiBi); got "
                         + ", ".join(n for n, x in (("cache", cache), ("attn_bias", attn_bias)) if x is not None))
    if w_o.dim() != 2 or w_o.shape[1] != inner:
        raise ValueError(f"w_o must be (d_out, {inner}); got {_checks.shape(w_o)}")
    record("projected_query", "Q = X W_qᵀ", q, latex=r"Q = X W_q^\top")
    if cached is None:
        record("projected_keys", "K = X W_kᵀ", k, latex=r"K = X W_k^\top")
        record("projected_values", "V = X W_vᵀ", v, latex=r"V = X W_v^\top")

    groups = num_heads // h_kv
    if need_weights and w_qkv is not None and groups == 1 and not active():
        # The reference path's bmm run faster on contiguous heads: one copy (3, b, h, n, d_h) for all three.
        qh, kh, vh = qkv.view(*query.shape[:2], 3, num_heads, d_h).permute(2, 0, 3, 1, 4).contiguous().unbind(0)
        del qkv
    elif cached is not None:
        qh, (kh, vh) = split_heads(q, num_heads), cached  # (b, h, q, d_h); (b, h_kv, k, d_h) as stored
    else:
        qh = split_heads(q, num_heads)  # (b, h, q, d_h)
        kh = split_heads(k, h_kv)  # (b, h_kv, k_new, d_h)
        vh = split_heads(v, h_kv)  # (b, h_kv, k_new, d_h)
    del q, k, v  # the heads hold what is needed: a buffer that was copied is freed now, not at return
    offset = 0 if cache is None else cache.length
    if rotary is not None:
        qh = rotary(qh, offset)
        kh = kh if cached is not None else rotary(kh, offset)
    if memory_cache is not None and cached is None:
        memory_cache.store(key, value, kh, vh)
    if cache is not None:
        kh, vh = cache.update(kh, vh)  # (b, h_kv, k, d_h): cached + new
    kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)  # (b, h, k, d_h)
    k_len = kh.shape[-2]
    if mask is not None and mask.dim() == 2 and mask.shape == (query.shape[0], k_len):
        mask = mask[:, None, None, :]  # (b, k) padding → (b, 1, 1, k)
    if attn_bias is not None:
        bias = attn_bias(qh.shape[-2], k_len) if callable(attn_bias) else attn_bias
        mask = masks.combine(mask, bias.to(qh.dtype))
    if causal and qh.shape[-2] == 1:
        causal = False  # one query at the end of the keys (bottom-right) may attend every key
    if need_weights and not active():
        # Contiguous heads (no-ops after the packed copy above); the core folds the scale into q.
        qh, kh, vh = qh.contiguous(), kh.contiguous(), vh.contiguous()
    if pattern is not None:
        ctx, weights = _sparse_heads(qh, kh, vh, pattern, block, mask, causal, scale, dropout_p, need_weights)
    else:
        ctx, weights = attention(
            qh, kh, vh, mask=mask, causal=causal, scale=scale, dropout_p=dropout_p, need_weights=need_weights
        )  # (b, h, q, d_h), (b, h, q, k)
    heads = merge_heads(ctx)  # (b, q, h·d_h)
    record("heads", "concat(head_1, …, head_h)", heads, latex=r"\mathrm{concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)")
    out = F.linear(heads, w_o, b_o)  # (b, q, d_out)
    record("output", "MultiHead = concat(heads) W_oᵀ", out, latex=r"\mathrm{MultiHead} = \mathrm{concat}(\cdot)\, W_o^\top")
    return out, weights


def _sparse_heads(qh, kh, vh, pattern, block, mask, causal, scale, dropout_p, need_weights):
    """Self-attention of the heads (b, h, n, d_h) over the pairs ``pattern`` allows, tile by tile."""
    b, n, k_len = qh.shape[0], qh.shape[-2], kh.shape[-2]
    if not isinstance(pattern, patterns.Pattern):
        raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
    if n != k_len:
        raise ValueError(f"a sparse pattern is for self-attention (q = k); got q={n}, k={k_len}")
    if mask is not None and not (mask.dtype == torch.bool and tuple(mask.shape) == (b, 1, 1, n)):
        raise ValueError(
            f"with a sparse pattern, mask must be a bool padding mask (b, n) = ({b}, {n}) or (b, 1, 1, n), "
            f"True = real token; got shape {_checks.shape(mask)} dtype {mask.dtype}"
        )
    if causal:  # composed once per pattern, so that the kernel's plan cache is kept
        pattern = pattern.__dict__.setdefault("_and_causal", pattern & patterns.causal())
    ctx, _ = block_sparse_attention(qh, kh, vh, pattern, block=block, key_padding_mask=mask, scale=scale, dropout_p=dropout_p)
    weights = None
    if need_weights:  # dense (b, h, n, n), by rows: for small n
        weights = weights_for_rows(qh, kh, pattern, torch.arange(n, device=qh.device), key_padding_mask=mask, scale=scale)
    return ctx, weights


__all__ = ["multi_head_attention", "split_heads", "merge_heads", "repeat_kv"]
