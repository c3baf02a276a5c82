"""``MultiHeadAttention``: self-, cross-, grouped-query and multi-query attention as a module.

Vaswani et al. 2017, §3.2.2 (https://arxiv.org/abs/1706.03762); grouped-query heads:
Ainslie et al. 2023 (https://arxiv.org/abs/2305.13245); multi-query: Shazeer 2019
(https://arxiv.org/abs/1911.02150).

    head_i = softmax(Q W_i^Q (K W_g^K)ᵀ / √d_h + mask) V W_g^V,   g = i // (h / h_kv)
    (``scale=`` replaces 1/√d_h: T5 uses 1.0)
    MultiHead(Q, K, V) = concat(head_1 … head_h) W^O

A drop-in for ``torch.nn.MultiheadAttention`` (converters in ``attnlab.nn.convert``)
that fixes its known pains:

* one mask polarity: bool **True = may attend** (PyTorch's bool masks mean the
  opposite), float = additive bias; a ``(b, k)`` padding mask is accepted as is
  (unless b = q: then it is ambiguous and must be given as ``(b, 1, 1, k)``);
* a fully masked query row gives zero weights and a zero output with finite
  gradients, also with ``need_weights=True`` (PyTorch gives NaN);
* ``need_weights=False`` is the default, so the fused kernel runs unless the
  weights are asked for; asked-for weights are per head, (b, h, q, k), not averaged;
* grouped-query heads (``num_kv_heads``), a key/value cache for incremental
  decoding, and rotary (``rope=True``) or ALiBi (``alibi=True``) positions;
* long sequences: ``pattern=`` (any ``attnlab.patterns`` pattern: a sliding window,
  Longformer, BigBird, …) makes self-attention block-sparse, computing only the
  ``block`` × ``block`` tiles the pattern touches, forward and backward (O(n·w) for a
  window). ``mask`` is then a (b, 1, 1, n) (or (b, n)) bool padding mask. ``LocalAttention``,
  ``LongformerAttention`` and ``BigBirdAttention`` (``attnlab.nn.sparse``) are this
  module with the pattern built for you.

Parameters (``torch.nn.MultiheadAttention`` names and layout, so weights copy over):

| paper          | parameter                                                      |
|----------------|----------------------------------------------------------------|
| W^Q; W^K; W^V  | ``in_proj_weight`` ((h + 2·h_kv)·d_h, dim), packed, when kdim = vdim = dim; else ``q_proj_weight`` (h·d_h, dim), ``k_proj_weight`` (h_kv·d_h, kdim), ``v_proj_weight`` (h_kv·d_h, vdim) |
| biases         | ``in_proj_bias`` ((h + 2·h_kv)·d_h,) when ``qkv_bias``         |
| W^O            | ``out_proj`` (an ``nn.Linear(h·d_h, dim)``)                    |
| h, h_kv, d_h   | ``num_heads``, ``num_kv_heads``, ``head_dim = dim // num_heads`` |
| 1/√d_h         | ``scale`` (None: 1/√d_h), on every path: dense, sparse, context-parallel |

Shapes: query (b, q, dim), key (b, k, kdim), value (b, k, vdim) → (b, q, dim),
weights (b, h, q, k). Masks (``attnlab.masks.score_mask``): (k,) for every query,
2-D (b, k) padding or (q, k) for every sequence (read by the shape; when b = q it is
ambiguous and raises ``ValueError``: pass (b, 1, 1, k) or (1, 1, q, k)), 3-D (b, q, k),
or 4-D, broadcastable to (b, h, q, k). With a ``cache`` the mask's k counts the cached keys too.
Unbatched, as torch takes them: query (q, dim), key (k, kdim), value (k, vdim) → (q, dim), weights
(h, q, k), masks (k,) or (q, k). A float mask of another floating dtype is converted to the scores'.

torch's ``add_bias_kv`` (parameters ``bias_k``, ``bias_v`` (1, 1, dim)) and ``add_zero_attn`` append a
learned and/or a zero key/value row after the projected keys: k grows by one per option, and those
columns are never masked, so with them no row is fully masked (torch's numbers, not the zero row).

The paper's steps are the functions of ``attnlab.functional.multihead``
(``project``, ``split_heads``, the core ``attention``, ``merge_heads``,
``output_projection``); this module adds what the paper has not: the packed
projection, caches, rotary/ALiBi, and the sparse dispatch to
``attnlab.kernels.block_sparse_attention``.

Padding: key and value inputs at positions that no query may attend are zeroed
before the projections (``torch.where``), so NaN or inf there never reaches an
output or any gradient, W_k's and W_v's included. In self-attention a bool
``(b, 1, 1, n)`` padding mask (or ``(b, n)``, b != n) also marks padded *queries*:
their inputs are zeroed too and their outputs (and weights) are defined as zeros.
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch
from torch import nn

from .. import _checks, masks, patterns
from ..functional.attention import attention
from ..functional.multihead import (
    check_inputs,
    merge_heads,
    output_projection,
    project,
    project_packed,
    repeat_kv,
    split_heads,
    zero_unreachable,
)
from ..kernels.block_sparse import block_sparse_attention, weights_for_rows
from ..patterns import Pattern
from ..trace import active
from .cache import LayerCache, MemoryCache
from .padding import padded_queries, zero_padded
from .positional import ALiBi, RotaryEmbedding
from .registry import register

CONTIGUOUS_HEADS_FROM = 3072  # query length from which inference makes the heads contiguous (see forward)


class ProjectionWeights(TypedDict):
    """``MultiHeadAttention.projection_weights()``: W_q (h·d_h, dim), W_k, W_v (h_kv·d_h, kdim|vdim), biases or None."""

    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None


def _unbatched(query: object, key: object, value: object) -> bool:
    """Are query, key and value unbatched (2-D)? All of them or none (a mix raises ``ValueError``)."""
    given = [(n, t) for n, t in (("query", query), ("key", key), ("value", value)) if isinstance(t, torch.Tensor)]
    flat = [t.dim() == 2 for _, t in given]
    if any(flat) and not all(flat):
        shapes = ", ".join(f"{n} {_checks.shape(t)}" for n, t in given)
        raise ValueError(f"query, key and value must all be batched (b, n, d) or all unbatched (n, d); got {shapes}")
    return bool(flat) and flat[0] and given[0][0] == "query"


def _batched(
    query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None, dim: int,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Unbatched (n, d) query, key and value → (1, n, d), keeping self-attention's ``key is query``."""
    if query.shape[-1] != dim:
        raise ValueError(f"query must be (b, q, dim) or unbatched (q, dim) with dim={dim}; got shape {_checks.shape(query)}")
    q = query.unsqueeze(0)
    k = None if key is None else q if key is query else key.unsqueeze(0)
    v = None if value is None else q if value is query else k if value is key else value.unsqueeze(0)
    return q, k, v


@register("multi-head")
class MultiHeadAttention(nn.Module):
    """Multi-head attention; self-attention when ``key`` is None, cross-attention otherwise."""

    # packed (kdim = vdim = dim): in_proj_weight, else the three separate ones; the others are None
    in_proj_weight: nn.Parameter | None
    q_proj_weight: nn.Parameter | None
    k_proj_weight: nn.Parameter | None
    v_proj_weight: nn.Parameter | None

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        qkv_bias: bool = True,
        proj_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        rope: bool = False,
        rope_base: float = 10000.0,
        alibi: bool = False,
        pattern: Pattern | None = None,
        block: int = 64,
        context_parallel: Any = None,
        cp_mode: str = "ring",
        cp_layout: str = "contiguous",
        scale: float | None = None,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
    ):
        super().__init__()
        if dim < 1 or num_heads < 1 or dim % num_heads:
            raise ValueError(
                f"dim must be a positive multiple of num_heads (divisible by it); got dim={dim}, num_heads={num_heads}"
            )
        if pattern is not None and not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        if pattern is not None and alibi:
            raise ValueError("pattern= and alibi=True do not combine: the block-sparse kernel adds no bias")
        h_kv = num_heads if num_kv_heads is None else num_kv_heads
        if h_kv < 1 or num_heads % h_kv:
            raise ValueError(f"num_kv_heads must divide num_heads; got num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        if rope and alibi:
            raise ValueError("choose one of rope=True and alibi=True")
        if context_parallel is not None and (alibi or (rope and cp_layout != "contiguous")):
            raise ValueError("context_parallel works without ALiBi, and with rope=True only on the contiguous layout "
                             f"(global positions rank·n/W + i); got alibi={alibi}, rope={rope}, cp_layout={cp_layout!r}")
        if (add_bias_kv or add_zero_attn) and (pattern is not None or context_parallel is not None or rope or alibi):
            raise ValueError("add_bias_kv and add_zero_attn (torch.nn.MultiheadAttention's extra keys) work without "
                             f"pattern=, context_parallel, rope and alibi; got pattern={pattern!r}, "
                             f"context_parallel={context_parallel!r}, rope={rope}, alibi={alibi}")
        # the scores' factor: None for 1/√d_h; T5 uses 1.0 (its relative bias carries the scale)
        self.scale = None if scale is None else _checks.scale(scale)
        self.dim, self.num_heads, self.num_kv_heads = dim, num_heads, h_kv
        self.head_dim = dim // num_heads
        self.kdim, self.vdim = kdim or dim, vdim or dim
        self.attn_drop = attn_drop
        q_out, kv_out = dim, h_kv * self.head_dim
        self.packed = self.kdim == dim and self.vdim == dim
        if self.packed:
            self.in_proj_weight = nn.Parameter(torch.empty(q_out + 2 * kv_out, dim))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(q_out, dim))
            self.k_proj_weight = nn.Parameter(torch.empty(kv_out, self.kdim))
            self.v_proj_weight = nn.Parameter(torch.empty(kv_out, self.vdim))
        self.in_proj_bias = nn.Parameter(torch.zeros(q_out + 2 * kv_out)) if qkv_bias else None
        self.out_proj = nn.Linear(dim, dim, bias=proj_bias)
        # torch.nn.MultiheadAttention's extra keys: a learned key/value row (1, 1, h_kv·d_h) and/or a zero row,
        # appended after the projected keys and values, that every query may attend
        self.bias_k = nn.Parameter(torch.empty(1, 1, kv_out)) if add_bias_kv else None
        self.bias_v = nn.Parameter(torch.empty(1, 1, kv_out)) if add_bias_kv else None
        self.add_zero_attn = add_zero_attn
        self.proj_drop = nn.Dropout(proj_drop)
        self.rotary = RotaryEmbedding(self.head_dim, base=rope_base) if rope else None
        self.alibi = ALiBi(num_heads) if alibi else None
        self.pattern, self.block = pattern, block
        # A torch.distributed process group (True: the default group): forward takes this rank's shard of the
        # sequence, (b, n/W, dim), and attends over the whole one (attnlab.distributed.context_parallel_attention).
        self.context_parallel, self.cp_mode, self.cp_layout = context_parallel, cp_mode, cp_layout
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                nn.init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
        if self.out_proj.bias is not None:
            nn.init.zeros_(self.out_proj.bias)
        for w in (self.bias_k, self.bias_v):
            if w is not None:
                nn.init.xavier_normal_(w)

    def projection_weights(self) -> ProjectionWeights:
        """W_q, W_k, W_v and their biases as separate tensors (views of the packed ones)."""
        q_out, kv_out = self.dim, self.num_kv_heads * self.head_dim
        if self.in_proj_weight is not None:  # packed
            w_q, w_k, w_v = self.in_proj_weight.split([q_out, kv_out, kv_out])
        else:
            assert self.q_proj_weight is not None and self.k_proj_weight is not None and self.v_proj_weight is not None
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b = self.in_proj_bias
        b_q, b_k, b_v = b.split([q_out, kv_out, kv_out]) if b is not None else (None, None, None)
        return {"w_q": w_q, "w_k": w_k, "w_v": w_v, "b_q": b_q, "b_k": b_k, "b_v": b_v}

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: LayerCache | MemoryCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query (b, q, dim); key (b, k, kdim) or None (self-attention); value (b, k, vdim), default key.

        ``cache``: a ``LayerCache`` for self-attention (incremental decoding), or a ``MemoryCache``
        for cross-attention (the memory's keys and values projected once, reused while the same
        memory tensor is passed).

        Returns ``(output (b, q, dim), weights (b, h, q, k) or None)``.

        Unbatched inputs, as ``torch.nn.MultiheadAttention`` takes them: query (q, dim), key (k, kdim),
        value (k, vdim) (all 2-D, or none) → ``(output (q, dim), weights (h, q, k) or None)``; the mask
        is then (k,) for every query or (q, k) (attnlab's polarity: True = may attend, float = bias).

        A float mask (additive bias) of another floating dtype than the scores is converted to theirs
        (a float16 bias with float64 queries), as torch converts it. With ``add_bias_kv`` and/or
        ``add_zero_attn`` the keys (and the weights' k) grow by one column each, appended after the
        real keys, that every query may attend: no row is ever fully masked then (a row whose real
        keys are all masked attends only those columns, as in torch).
        """
        if _unbatched(query, key, value):
            query, key, value = _batched(query, key, value, self.dim)
            out, weights = self._forward(query, key, value, mask, causal, need_weights, cache)
            return out[0], None if weights is None else weights[0]
        return self._forward(query, key, value, mask, causal, need_weights, cache)

    def _forward(
        self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None, mask: torch.Tensor | None,
        causal: bool, need_weights: bool, cache: LayerCache | MemoryCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward`` on batched inputs (b, q, dim)."""
        key, value, self_attention, cache, memory_cache = self._check_call(query, key, value, cache)
        if self.context_parallel is not None:
            return self._context_parallel(query, key, value, self_attention, mask, causal, need_weights, cache)
        b, q_len = query.shape[:2]
        if mask is not None:
            _checks.tensor("mask", mask)
        offset = 0 if cache is None else cache.length
        smask, padding = masks.score_mask(mask, b, q_len, offset + key.shape[1])  # broadcastable to (b, h, q, k)
        pad_q = None  # (b, q) True = a real query token, in self-attention with a (b, n) padding mask
        if self_attention:
            query, pad_q = padded_queries(query, smask, padding)
        qh, kh, vh = self._heads(query, key, value, smask, self_attention, cache, memory_cache, need_weights)
        if causal and q_len == 1:
            causal = False  # one query at the end of the keys (bottom-right) may attend every key
        if self.bias_k is not None or self.add_zero_attn:
            kh, vh, smask = self._extra_keys(kh, vh, masks.combine(smask, masks.causal(q_len, kh.shape[2],
                                                                           device=kh.device) if causal else None))
            causal = False  # the causal mask covers the real keys only: the extra ones are open to every query
        # decoding one token over a cache with a padding mask: the padded positions' keys and values were
        # projected from inputs zeroed when they were written (``padded_queries``), so they are finite and
        # the non-finite rule makes no pass over the cache (its cost follows the new token, not the cache)
        kv_finite = cache is not None and q_len == 1 and pad_q is not None
        ctx, weights = self._attend(qh, kh, vh, smask, causal, need_weights, kv_finite)  # (b, h, q, d_h)
        out = output_projection(merge_heads(ctx), self.out_proj.weight, self.out_proj.bias)  # (b, q, dim)
        out, weights = zero_padded(out, weights, pad_q)  # padded queries: zero output (and zero weights)
        return self.proj_drop(out), weights

    def _check_call(
        self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None,
        cache: LayerCache | MemoryCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor, bool, LayerCache | None, MemoryCache | None]:
        """The call's arguments checked: (key, value, self-attention?, the layer cache, the memory cache)."""
        if key is None and value is not None:
            raise ValueError("value given without key: pass key too (or neither, for self-attention)")
        key = query if key is None else key
        value = key if value is None else value
        self_attention = key is query and value is query  # m(x) and PyTorch-style m(x, x, x)
        if query.dim() != 3 or query.shape[-1] != self.dim:
            raise ValueError(f"query must be (b, q, dim) with dim={self.dim}; got shape {tuple(query.shape)}")
        if self.pattern is not None and not self_attention:
            raise ValueError("a module with a sparse pattern does self-attention: call it as m(x), without key and value")
        memory_cache = None
        if isinstance(cache, MemoryCache):
            if self_attention:
                raise ValueError("a MemoryCache is for cross-attention over a fixed memory; self-attention takes a LayerCache")
            memory_cache, cache = cache, None
        elif cache is not None and not self_attention:
            raise ValueError(
                "cache is for self-attention (keys that grow by one token a step); "
                "cross-attention keys are fixed: pass key=memory and an attnlab.nn.MemoryCache (or no cache)"
            )
        if self.pattern is not None and cache is not None:
            raise ValueError("a sparse pattern works without a cache (and without ALiBi); got a cache")
        check_inputs(query, key, value)
        return key, value, self_attention, cache, memory_cache

    def _heads(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, smask: torch.Tensor | None,
        self_attention: bool, cache: LayerCache | None, memory_cache: MemoryCache | None, need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projections, heads, positions and caches: (q (b, h, q, d_h), k and v (b, h_kv, k, d_h), the
        cached part included)."""
        b, q_len = query.shape[:2]
        h, h_kv, d_h = self.num_heads, self.num_kv_heads, self.head_dim
        offset = 0 if cache is None else cache.length
        cached = None if memory_cache is None else memory_cache.lookup(key, value)
        k: torch.Tensor | None
        v: torch.Tensor | None
        if self.in_proj_weight is not None and self_attention:  # packed
            q, k, v = project_packed(query, self.in_proj_weight, self.in_proj_bias, (h * d_h, h_kv * d_h, h_kv * d_h))
        else:
            p = self.projection_weights()
            q = project(query, p["w_q"], p["b_q"], "query")  # (b, q, h·d_h)
            k = v = None
            if cached is None:
                key_in, value_in = key, value
                if smask is not None and not self_attention and cache is None:
                    key_in, value_in = zero_unreachable(key, smask), zero_unreachable(value, smask)
                k = project(key_in, p["w_k"], p["b_k"], "keys")  # (b, k, h_kv·d_h)
                v = project(value_in, p["w_v"], p["b_v"], "values")  # (b, k, h_kv·d_h)
        long_inference = q_len >= CONTIGUOUS_HEADS_FROM and not torch.is_grad_enabled()
        if (need_weights or long_inference) and self.packed and self_attention and h == h_kv and not active():
            # The reference path's bmm (and, for n >= 3072, SDPA's CPU flash kernel: 3-13 % measured)
            # run faster on contiguous heads: one copy (3, b, h, n, d_h) for all three.
            assert k is not None and v is not None  # projected above (packed self-attention)
            if torch.is_grad_enabled():
                qkv = torch.stack((q, k, v)).view(3, b, q_len, h, d_h)
            else:  # q, k, v are views of one (b, n, 3·h·d_h) projection: read it as (3, b, n, h, d_h), no stack copy
                qkv = q.as_strided((3, b, q_len, h, d_h), (h * d_h, q.stride(0), q.stride(1), d_h, 1))
            qh, kh, vh = qkv.permute(0, 1, 3, 2, 4).contiguous().unbind(0)
        elif cached is not None:
            qh, (kh, vh) = split_heads(q, h), cached  # (b, h, q, d_h); (b, h_kv, k, d_h) as stored
        else:
            assert k is not None and v is not None  # projected above (nothing cached)
            qh, kh, vh = split_heads(q, h), split_heads(k, h_kv), split_heads(v, h_kv)
        if self.rotary is not None:
            qh = self.rotary(qh, offset)
            kh = kh if cached is not None else self.rotary(kh, offset)
        if memory_cache is not None and cached is None:
            memory_cache.store(key, value, kh, vh)
        if cache is not None:
            kh, vh = cache.update(kh, vh)  # (b, h_kv, k, d_h): cached + new
        return qh, kh, vh

    def _extra_keys(
        self, kh: torch.Tensor, vh: torch.Tensor, smask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """torch's ``add_bias_kv`` (a learned row) then ``add_zero_attn`` (a zero row) appended to the keys and
        values (b, h_kv, k, d_h) → (b, h_kv, k + n, d_h), and to the mask as n columns every query may attend."""
        b, h_kv, k_len, d_h = kh.shape
        ks, vs = [kh], [vh]
        if self.bias_k is not None and self.bias_v is not None:
            ks.append(self.bias_k.to(kh.dtype).view(1, h_kv, 1, d_h).expand(b, -1, -1, -1))
            vs.append(self.bias_v.to(vh.dtype).view(1, h_kv, 1, d_h).expand(b, -1, -1, -1))
        if self.add_zero_attn:
            ks.append(kh.new_zeros(b, h_kv, 1, d_h))
            vs.append(vh.new_zeros(b, h_kv, 1, d_h))
        return torch.cat(ks, dim=2), torch.cat(vs, dim=2), masks.append_keys(smask, k_len, len(ks) - 1)

    def _attend(
        self, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, smask: torch.Tensor | None, causal: bool,
        need_weights: bool, kv_finite: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The heads' attention: (context (b, h, q, d_h), weights (b, h, q, k) or None)."""
        b, h, q_len, d_h = qh.shape
        h_kv = kh.shape[1]
        groups = h // h_kv
        smask = masks.in_dtype(smask, qh.dtype)  # a float16 bias with float64 queries: in the scores' dtype
        # one query per head (decoding) with grouped heads: each group's queries attend their key/value head
        # together as (b, h_kv, groups, d_h), so the cache is never copied per step
        fold = (groups > 1 and q_len == 1 and not need_weights and self.alibi is None and self.pattern is None
                and (smask is None or (smask.dim() == 4 and smask.shape[1] == 1 and smask.shape[2] == 1)))
        if not fold:
            kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)  # (b, h, k, d_h)
        if self.alibi is not None:
            smask = masks.combine(smask, self.alibi(q_len, kh.shape[-2]).to(qh.dtype))
        if need_weights and not active():
            qh, kh, vh = qh.contiguous(), kh.contiguous(), vh.contiguous()  # no-ops after the packed copy
        dropout_p = self.attn_drop if self.training else 0.0
        if self.pattern is not None:
            return self._sparse_heads(qh, kh, vh, smask, causal, dropout_p, need_weights)
        if fold:
            ctx, _ = attention(qh.reshape(b, h_kv, groups, d_h), kh, vh, mask=smask, dropout_p=dropout_p,
                               kv_finite=kv_finite, scale=self.scale)
            return ctx.reshape(b, h, 1, d_h), None
        return attention(qh, kh, vh, mask=smask, causal=causal, dropout_p=dropout_p, need_weights=need_weights,
                         kv_finite=kv_finite, scale=self.scale)

    def _context_parallel(
        self,
        x: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        self_attention: bool,
        mask: torch.Tensor | None,
        causal: bool,
        need_weights: bool,
        cache: LayerCache | None,
    ) -> tuple[torch.Tensor, None]:
        """Self-attention of this rank's shard x (b, n/W, dim) over the whole sharded sequence."""
        from ..distributed import context_parallel_attention
        from ..distributed.layout import world

        if not self_attention or cache is not None or need_weights:
            raise ValueError("context_parallel is for self-attention m(x) of a sharded sequence, without a cache "
                             "and without weights (they would be n × n)")
        if mask is not None and not (mask.dtype == torch.bool and tuple(mask.shape) == tuple(x.shape[:2])):
            raise ValueError(f"with context_parallel, mask is this rank's (b, n/W) bool padding mask; got "
                             f"{mask.dtype} {tuple(mask.shape)}")
        group = None if self.context_parallel is True else self.context_parallel
        b, n_local = x.shape[:2]
        h, h_kv = self.num_heads, self.num_kv_heads
        p = self.projection_weights()
        if mask is not None:  # padded tokens: zero in (no NaN reaches a projection), zero out
            x = torch.where(mask.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))
        qh = split_heads(project(x, p["w_q"], p["b_q"], "query"), h)  # (b, h, n/W, d_h)
        kh = split_heads(project(x, p["w_k"], p["b_k"], "keys"), h_kv)
        vh = split_heads(project(x, p["w_v"], p["b_v"], "values"), h_kv)
        if self.rotary is not None:  # the contiguous layout: this rank's positions start at rank · n/W
            offset = world(group)[0] * n_local
            qh, kh = self.rotary(qh, offset), self.rotary(kh, offset)
        groups = h // h_kv
        kh, vh = repeat_kv(kh, groups), repeat_kv(vh, groups)
        ctx, _ = context_parallel_attention(qh, kh, vh, causal=causal, pattern=self.pattern, key_padding_mask=mask,
                                            mode=self.cp_mode, group=group, layout=self.cp_layout, scale=self.scale)
        out = output_projection(merge_heads(ctx), self.out_proj.weight, self.out_proj.bias)  # (b, n/W, dim)
        if mask is not None:
            out = torch.where(mask.unsqueeze(-1), out, torch.zeros((), dtype=out.dtype, device=out.device))
        return self.proj_drop(out), None

    def _sparse_heads(
        self,
        qh: torch.Tensor,
        kh: torch.Tensor,
        vh: torch.Tensor,
        mask: torch.Tensor | None,
        causal: bool,
        dropout_p: float,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention of the heads (b, h, n, d_h) over the pairs the pattern allows, tile by tile."""
        b, n = qh.shape[0], qh.shape[-2]
        if mask is not None and not (mask.dtype == torch.bool and tuple(mask.shape) == (b, 1, 1, n)):
            raise ValueError(
                f"with a sparse pattern, mask must be a bool padding mask (b, n) = ({b}, {n}) or (b, 1, 1, n), "
                f"True = real token; got shape {_checks.shape(mask)} dtype {mask.dtype}"
            )
        pattern = self.pattern
        assert pattern is not None  # called only by a module with a pattern
        if causal:  # composed once per module, so that the kernel's plan cache is kept
            if getattr(self, "_causal_pattern", None) is None:
                self._causal_pattern = pattern & patterns.causal()
            pattern = self._causal_pattern
        ctx, _ = block_sparse_attention(qh, kh, vh, pattern, block=self.block, key_padding_mask=mask, dropout_p=dropout_p,
                                        scale=self.scale)
        weights = None
        if need_weights:  # dense (b, h, n, n), by rows: for small n
            weights = weights_for_rows(qh, kh, pattern, torch.arange(n, device=qh.device), key_padding_mask=mask,
                                       scale=self.scale)
        return ctx, weights

    def extra_repr(self) -> str:
        extra = []
        if self.num_kv_heads != self.num_heads:
            extra.append(f"num_kv_heads={self.num_kv_heads}")
        if self.kdim != self.dim or self.vdim != self.dim:
            extra.append(f"kdim={self.kdim}, vdim={self.vdim}")
        if self.attn_drop:
            extra.append(f"attn_drop={self.attn_drop}")
        if self.scale is not None:
            extra.append(f"scale={self.scale:g}")
        if self.pattern is not None:
            extra.append(f"pattern={self.pattern!r}, block={self.block}")
        if self.bias_k is not None:
            extra.append("add_bias_kv=True")
        if self.add_zero_attn:
            extra.append("add_zero_attn=True")
        return ", ".join([f"dim={self.dim}, num_heads={self.num_heads}", *extra])


@register("gqa")
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention: ``num_kv_heads`` key/value heads shared by groups of query heads."""

    def __init__(self, dim: int, num_heads: int, *, num_kv_heads: int, **kwargs: Any):
        super().__init__(dim, num_heads, num_kv_heads=num_kv_heads, **kwargs)


@register("cross")
class CrossAttention(MultiHeadAttention):
    """Cross-attention: queries from one sequence, keys and values from ``context``.

    ``forward(query (b, q, dim), context (b, k, kdim), *, mask, need_weights)``.
    """

    def forward(  # type: ignore[override]
        self,
        query: torch.Tensor,
        context: torch.Tensor,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        cache: LayerCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if context is None:
            raise ValueError("CrossAttention needs a context (b, k, kdim) to attend to")
        return super().forward(query, context, value, mask=mask, causal=causal, need_weights=need_weights, cache=cache)


__all__ = ["MultiHeadAttention", "GroupedQueryAttention", "CrossAttention"]
