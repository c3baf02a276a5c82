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
* the heads' attention is a value the module holds, its ``backend`` (``attnlab.nn.backends``):
  ``Dense()`` (the default), ``BlockSparse(pattern, block=64)`` (self-attention over the pairs an
  ``attnlab.patterns`` pattern allows, only the ``block`` × ``block`` tiles it touches, forward and
  backward: O(n·w) for a window; ``mask`` is then a (b, n) bool padding mask) or
  ``ContextParallel(group, mode, layout)`` (this rank's shard (b, n/W, dim) over the whole sharded
  sequence; ``mask`` is this rank's (b, n/W) bool padding mask). Build with ``backend=`` or swap it on a
  built module (``m.backend = BlockSparse(...)``): the parameters stay. ``LocalAttention``,
  ``LongformerAttention`` and ``BigBirdAttention`` (``attnlab.nn.sparse``) are this module with the
  pattern built for you.

Parameters (``torch.nn.MultiheadAttention`` names and layout, so weights copy over):

| paper          | parameter                                                      |
|----------------|----------------------------------------------------------------|
| W^Q; W^K; W^V  | ``in_proj_weight`` ((h + 2·h_kv)·d_h, dim), packed, when kdim = vdim = dim; else ``q_proj_weight`` (h·d_h, dim), ``k_proj_weight`` (h_kv·d_h, kdim), ``v_proj_weight`` (h_kv·d_h, vdim) |
| biases         | ``in_proj_bias`` ((h + 2·h_kv)·d_h,) when ``qkv_bias``         |
| W^O            | ``out_proj`` (an ``nn.Linear(h·d_h, dim)``)                    |
| h, h_kv, d_h   | ``num_heads``, ``num_kv_heads``, ``head_dim = dim // num_heads`` |
| 1/√d_h         | ``scale`` (None: 1/√d_h), on every backend: dense, sparse, context-parallel |

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
projection, caches, rotary/ALiBi, and the backend it calls for the heads' attention.

Padding: key and value inputs at positions that no query may attend are zeroed
before the projections (``torch.where``), so NaN or inf there never reaches an
output or any gradient, W_k's and W_v's included. In self-attention a bool
``(b, 1, 1, n)`` padding mask (or ``(b, n)``, b != n) also marks padded *queries*:
their inputs are zeroed too and their outputs (and weights) are defined as zeros, whichever
backend runs (the rule of ``attnlab.functional.multihead.padded_queries`` and ``zero_padded``, which
``attnlab.functional.multi_head_attention`` follows too).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .. import _checks, masks
from ..functional.multihead import (
    ProjectionWeights,
    check_inputs,
    merge_heads,
    multi_head_attention,
    output_projection,
    project,
    project_packed,
    split_heads,
    zero_unreachable,
)
from ..mask import Mask
from ..trace import active, record
from .backends import Backend, Dense
from .cache import LayerCache, MemoryCache
from .padding import padded_queries, zero_padded
from .positional import ALiBi, RotaryEmbedding
from .registry import register

CONTIGUOUS_HEADS_FROM = 3072  # query length from which inference makes the heads contiguous (see forward)


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


def _value_mask_for_module(
    mask: Mask, b: int, q_len: int, k_len: int, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A mask value, checked against the call, as the module's own steps read it: (the keys no query may
    attend, as its dense form or None for causal alone; its (b, 1, 1, k) key padding or None, which in
    self-attention marks the padded queries too)."""
    mask.check(b, q_len, k_len)
    keys = mask.key_padding
    pad = None if keys is None else mask.plan(("key padding", device), lambda: keys[:, None, None, :].to(device))
    if mask.keys is not None:
        return pad, pad
    return (None if mask.is_causal else mask.tensor(q_len, k_len, device)), pad


def _check_backend(backend: Backend, mask: torch.Tensor | Mask | None, self_attention: bool, cached: bool,
                   need_weights: bool) -> None:
    """The mask's type checked, then the one refusal of a call the module's backend cannot make (it says
    what it supports)."""
    if mask is not None and not isinstance(mask, Mask):
        _checks.tensor("mask", mask)
    if backend.supports(mask, self_attention=self_attention, cached=cached, need_weights=need_weights):
        return
    given = [("self-attention" if self_attention else "cross-attention (key and value given)")]
    given += ["a cache"] * cached + ["need_weights=True"] * need_weights
    if isinstance(mask, torch.Tensor):
        given.append(f"a {mask.dtype} mask of shape {_checks.shape(mask)}")
    elif mask is not None:
        given.append(f"the mask {mask!r}")
    raise ValueError(f"the backend {backend!r} takes {backend.takes}; got {', '.join(given)}")


@register("multi-head", functional=multi_head_attention, supports=("mask", "causal", "weights", "cache"))
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
        backend: Backend | None = None,
        scale: float | None = None,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
    ):
        super().__init__()
        if dim < 1 or num_heads < 1 or dim % num_heads:
            raise ValueError(
                f"dim must be a positive multiple of num_heads (divisible by it); got dim={dim}, num_heads={num_heads}"
            )
        h_kv = num_heads if num_kv_heads is None else num_kv_heads
        if h_kv < 1 or num_heads % h_kv:
            raise ValueError(f"num_kv_heads must divide num_heads; got num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        if rope and alibi:
            raise ValueError("choose one of rope=True and alibi=True")
        backend = Dense() if backend is None else backend
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
        self.backend = backend  # checked against rope, alibi and the extra keys by the setter
        self.reset_parameters()

    @property
    def backend(self) -> Backend:
        """The heads' attention (``attnlab.nn.backends``): ``Dense()``, ``BlockSparse(...)``, ``ContextParallel(...)``.

        Swappable on a built module (``m.backend = BlockSparse(pattern)``): the parameters stay as they are."""
        return self._backend

    @backend.setter
    def backend(self, backend: Backend) -> None:
        if not isinstance(backend, Backend) or type(backend).__call__ is Backend.__call__:
            given = "the abstract Backend()" if isinstance(backend, Backend) else type(backend).__name__
            raise ValueError(f"backend must be an attnlab.nn.backends.Backend (Dense(), BlockSparse(pattern), "
                             f"ContextParallel(group)); got {given}")
        rope, alibi = self.rotary is not None, self.alibi is not None
        backend.check_module(rope=rope, alibi=alibi)
        if (self.bias_k is not None or self.add_zero_attn) and (rope or alibi or not backend.accepts_extra_keys):
            raise ValueError("add_bias_kv and add_zero_attn (torch.nn.MultiheadAttention's extra keys, Dense backend "
                             "only) work without a sparse or context-parallel backend, rope and alibi; got "
                             f"backend={backend!r}, rope={rope}, alibi={alibi}")
        self._backend = backend

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
        """W_q, W_k, W_v (views of the packed one), W_o and their biases (None without): the dict
        ``attnlab.functional.multi_head_attention`` takes. With the Dense backend and none of rope, alibi,
        add_bias_kv, add_zero_attn,
        ``multi_head_attention(x, x, x, m.projection_weights(), num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads, scale=m.scale)`` is ``m(x)``."""
        q_out, kv_out = self.dim, self.num_kv_heads * self.head_dim
        if self.in_proj_weight is not None:  # packed
            w_q, w_k, w_v = self.in_proj_weight.split([q_out, kv_out, kv_out])
        else:
            assert self.q_proj_weight is not None and self.k_proj_weight is not None and self.v_proj_weight is not None
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b = self.in_proj_bias
        b_q, b_k, b_v = b.split([q_out, kv_out, kv_out]) if b is not None else (None, None, None)
        return {"w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": self.out_proj.weight,
                "b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": self.out_proj.bias}

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | Mask | None = None,
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
        self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None,
        mask: torch.Tensor | Mask | None, causal: bool, need_weights: bool, cache: LayerCache | MemoryCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``forward`` on batched inputs (b, q, dim)."""
        key, value, self_attention, cache, memory_cache = self._check_call(query, key, value, cache)
        _check_backend(self.backend, mask, self_attention, cache is not None, need_weights)
        b, q_len = query.shape[:2]
        offset = 0 if cache is None else cache.length
        value_mask = None
        if isinstance(mask, Mask):  # a mask value goes to the backend as it is
            value_mask = mask
            smask, key_pad = _value_mask_for_module(mask, b, q_len, offset + key.shape[1], query.device)
        else:
            if self.backend.key_padding_only and mask is not None and mask.dim() == 2:
                mask = mask[:, None, None, :]  # (b, k): padding, never the (q, k) reading
            smask, padding = masks.score_mask(mask, b, q_len, offset + key.shape[1])  # broadcastable to (b, h, q, k)
            key_pad = smask if padding else None
        pad_q = None  # (b, q) True = a real query token, in self-attention with a (b, n) padding mask
        if self_attention:
            query, pad_q = padded_queries(query, key_pad, key_pad is not None)
        qh, kh, vh = self._heads(query, key, value, smask, self_attention, cache, memory_cache, need_weights)
        if value_mask is not None and (self.bias_k is not None or self.add_zero_attn or self.alibi is not None):
            smask, value_mask = value_mask.tensor(q_len, kh.shape[2], kh.device), None  # columns or a bias to add
        if self.bias_k is not None or self.add_zero_attn:
            # (one query at the end of the keys may attend every key: no causal mask to add for it)
            kh, vh, smask = self._extra_keys(kh, vh, masks.combine(smask, masks.causal(
                q_len, kh.shape[2], device=kh.device) if causal and q_len > 1 else None))
            causal = False  # the causal mask covers the real keys only: the extra ones are open to every query
        if self.alibi is not None:
            smask = masks.combine(masks.in_dtype(smask, qh.dtype), self.alibi(q_len, kh.shape[-2]).to(qh.dtype))
        # decoding one token over a cache with a padding mask: the padded positions' keys and values were
        # projected from inputs zeroed when they were written (``padded_queries``), so they are finite and
        # the non-finite rule makes no pass over the cache (its cost follows the new token, not the cache)
        kv_finite = cache is not None and q_len == 1 and pad_q is not None
        ctx, weights = self.backend(qh, kh, vh, mask=smask if value_mask is None else value_mask, causal=causal, need_weights=need_weights, scale=self.scale,
                                    dropout_p=self.attn_drop if self.training else 0.0, kv_finite=kv_finite)
        out = output_projection(merge_heads(ctx), self.out_proj.weight, self.out_proj.bias)  # (b, q, dim)
        out, weights = zero_padded(out, weights, pad_q)  # padded queries: zero output (and zero weights)
        return (self.proj_drop(out) if self.training and self.proj_drop.p else out), weights

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
        check_inputs(query, key, value)
        if query.dtype != self.out_proj.weight.dtype or key.dtype != query.dtype:  # refused, never cast
            names, given = (("x",), (query,)) if self_attention else (("query", "key", "value"), (query, key, value))
            _checks.module_input(self, names, given)
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
            offset += self.backend.position_offset(q_len)  # a shard of a longer sequence: its first position
            qh = self.rotary(qh, offset)
            kh = kh if cached is not None else self.rotary(kh, offset)
        if memory_cache is not None and cached is None:
            memory_cache.store(key, value, kh, vh)
        if cache is not None:
            kh, vh = cache.update(kh, vh)  # (b, h_kv, k, d_h): cached + new
        if active():  # each head's q and k as its scores use them (the viewer's neuron view reads them)
            record("query_heads", "q_i split into heads (rotated by position under rope)", qh)
            record("key_heads", "k_j split into heads (rotated by position under rope, cached ones included)", kh)
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
        if not isinstance(self.backend, Dense):  # the default is left out, as torch leaves out defaults
            extra.append(f"backend={self.backend!r}")
        if self.bias_k is not None:
            extra.append("add_bias_kv=True")
        if self.add_zero_attn:
            extra.append("add_zero_attn=True")
        return ", ".join([f"dim={self.dim}, num_heads={self.num_heads}", *extra])


@register("gqa", functional=multi_head_attention, supports=("mask", "causal", "weights", "cache"))
class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention: ``num_kv_heads`` key/value heads shared by groups of query heads."""

    def __init__(self, dim: int, num_heads: int, *, num_kv_heads: int, **kwargs: Any):
        super().__init__(dim, num_heads, num_kv_heads=num_kv_heads, **kwargs)


@register("cross", aliases=("cross-attention",), functional=multi_head_attention, supports=("mask", "weights", "cache"))
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


__all__ = ["MultiHeadAttention", "GroupedQueryAttention", "CrossAttention", "ProjectionWeights"]
