"""Key/value caches for incremental (autoregressive) decoding.

A decoder that generates one token at a time would recompute the keys and
values of the whole prefix at every step: O(n²) projections for n tokens. A
cache keeps each layer's key and value heads, so a step projects only the new
token and attends over ``cached + new``:

    K_{1..t} = [K_{1..t-1}; k_t],   V_{1..t} = [V_{1..t-1}; v_t]
    out_t    = softmax(q_t K_{1..t}ᵀ / √d_h) V_{1..t}

The queries of a step sit at the *end* of the keys, which is why attnlab's
causal mask is aligned bottom-right (``attnlab.masks.causal``): decoding with
the cache gives the same outputs as recomputing the whole prefix (tested).

Shapes: key and value heads (b, h_kv, n, d_h). Grouped-query attention caches
the h_kv key/value heads *before* they are repeated for the query heads, which
is its memory saving. Rotary embeddings are applied before caching, so cached
keys carry their absolute positions.

Caveat: the buffers grow by doubling and are written in place; the cache is for
inference (under ``torch.no_grad``). When the keys require gradients the cache
falls back to concatenation so autograd stays correct.

Cache policies (``KVCache(num_layers, window=None, sinks=0)``):

=====================  ======================================================  ==========================
policy                 a one-token step attends                                 layer cache
=====================  ======================================================  ==========================
unbounded (default)    every earlier token and itself                           ``LayerCache``
sliding window w       the last w tokens, itself included (Mistral, Longformer) ``WindowCache(w)``
sinks s + window w     the first s tokens ("attention sinks") and the last w    ``WindowCache(w, sinks=s)``
=====================  ======================================================  ==========================

Sinks: Xiao et al., "Efficient Streaming Language Models with Attention Sinks"
(StreamingLLM), 2023, https://arxiv.org/abs/2309.17453. The first tokens take a
large share of the softmax mass in trained LMs; keeping their keys and values
lets a window cache run indefinitely with memory bounded by s + w tokens.

Eviction happens *after* a step, as in transformers' sliding-window layers:
``update`` returns the kept keys followed by all the new ones, then keeps the
sinks and the last w − 1 tokens for the next step. A step of one token thus
attends exactly sinks + window; a chunk of several tokens must also pass
``mask=cache.chunk_mask(n)`` (taken before the call, shape (1, 1, n, kept + n)) so that
each of its queries sees only its own sinks and window.

Positions after eviction: keys are rotated (RoPE) *before* caching, so each
kept key keeps its absolute position, and ``length`` counts every token seen
(it is the rotary offset of the next token). Decoding with a window cache thus
equals full attention over the same keys at their true positions (tested over
every step). StreamingLLM instead re-numbers the positions inside the cache
(keys cached un-rotated, rotated by their slot at each step) so that distances
never exceed the cache size; that variant is not implemented here.
"""

from __future__ import annotations

from typing import NoReturn

import torch

from .. import _checks


def _check_update(cached: torch.Tensor | None, k: torch.Tensor, v: torch.Tensor) -> None:
    """Refuse new heads k, v that are not (b, h_kv, n, d_h) alike, or do not fit the ``cached`` keys."""
    if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
        raise ValueError(f"cache.update expects k, v of shape (b, h_kv, n, d_h); got {_checks.shape(k)}, {_checks.shape(v)}")
    if cached is not None and (cached.shape[:2] != k.shape[:2] or cached.shape[-1] != k.shape[-1]):
        raise ValueError(
            f"new keys {_checks.shape(k)} do not fit the cached keys {_checks.shape(cached)} "
            "(same b, h_kv and d_h needed); call reset() to start a new sequence"
        )


class MemoryCache:
    """A cross-attention's projected memory keys and values, computed at the first decoding step
    and reused while the same memory tensor comes back.

    Cross-attention keys and values depend only on the memory (the encoder's output or an image's
    regions), so recomputing K = memory W_kᵀ, V = memory W_vᵀ at every generated token is wasted
    work: O(s·d²) per step and layer. The cache remembers the memory tensor it was filled from
    (by identity and shape) and projects again when a different one is passed, so a new batch or a
    reordered beam can never silently reuse stale keys.
    """

    def __init__(self) -> None:
        self._source: tuple[torch.Tensor, torch.Tensor] | None = None
        self.keys: torch.Tensor | None = None  # (b, h_kv, s, d_h)
        self.values: torch.Tensor | None = None

    def lookup(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The cached (keys, values) heads if they were made from these very tensors, else None."""
        src = self._source
        if src is not None and src[0] is key and src[1] is value and self.keys is not None and self.values is not None:
            return self.keys, self.values
        return None

    def store(self, key: torch.Tensor, value: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor) -> None:
        self._source, self.keys, self.values = (key, value), kh, vh

    def reset(self) -> None:
        self._source = self.keys = self.values = None

    def __repr__(self) -> str:
        return f"MemoryCache(keys={None if self.keys is None else tuple(self.keys.shape)})"


class LayerCache:
    """The cached key and value heads of one attention layer (and, in ``memory``, of its
    decoder layer's cross-attention)."""

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None  # (b, h_kv, capacity, d_h)
        self._v: torch.Tensor | None = None
        self.length = 0
        self.memory = MemoryCache()

    @property
    def keys(self) -> torch.Tensor | None:
        """(b, h_kv, length, d_h) or None when empty."""
        return None if self._k is None else self._k[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]

    def _filled(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled part of both buffers, (b, h_kv, length, d_h) each; only once they exist."""
        assert self._k is not None and self._v is not None  # (set together)
        return self._k[:, :, : self.length], self._v[:, :, : self.length]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new heads k, v (b, h_kv, n, d_h); return all cached (b, h_kv, length, d_h)."""
        _check_update(self._k, k, v)
        n = k.shape[2]
        if k.requires_grad or v.requires_grad:  # autograd-safe path
            if self._k is None:
                self._k, self._v = k, v
            else:
                old_k, old_v = self._filled()
                self._k = torch.cat([old_k, k], dim=2)
                self._v = torch.cat([old_v, v], dim=2)
            self.length += n
            return self._k, self._v
        need = self.length + n
        if self._k is None or self._v is None or need > self._k.shape[2] or self._k.requires_grad:
            cap = max(need, 2 * (self._k.shape[2] if self._k is not None else 0), 16)
            new_k = k.new_empty(*k.shape[:2], cap, k.shape[-1])
            new_v = v.new_empty(*v.shape[:2], cap, v.shape[-1])
            if self.length:
                old_k, old_v = self._filled()
                new_k[:, :, : self.length] = old_k
                new_v[:, :, : self.length] = old_v
            self._k, self._v = new_k, new_v
        self._k[:, :, self.length : need] = k
        self._v[:, :, self.length : need] = v
        self.length = need
        return self._filled()

    def buffers(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The whole key and value buffers (b, h_kv, capacity, d_h); the first ``length`` are filled.

        With ``from_buffers`` a decoder can keep its cache as plain tensors with the
        batch first (so beam search can reorder them with ``index_select``).
        """
        return self._k, self._v

    @classmethod
    def from_buffers(cls, k: torch.Tensor | None, v: torch.Tensor | None, length: int) -> LayerCache:
        """A cache over existing buffers (b, h_kv, capacity, d_h) whose first ``length`` positions are filled."""
        cache = cls()
        if k is None or v is None:
            if length:
                raise ValueError(f"a cache of length {length} needs key and value buffers")
            return cache
        if k.dim() != 4 or k.shape != v.shape or not 0 <= length <= k.shape[2]:
            raise ValueError(
                f"cache buffers must be k, v of one shape (b, h_kv, capacity, d_h) with length <= capacity; "
                f"got {_checks.shape(k)}, {_checks.shape(v)}, length {length}"
            )
        cache._k, cache._v, cache.length = k, v, int(length)
        return cache

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        self.memory.reset()

    def __repr__(self) -> str:
        shape = None if self.keys is None else tuple(self.keys.shape)
        return f"LayerCache(length={self.length}, keys={shape})"


class WindowCache(LayerCache):
    """A layer cache that keeps the first ``sinks`` tokens and a sliding window of the last ``window``.

    ``length`` counts every token seen (the rotary offset); ``keys``/``values`` hold the kept
    ones (b, h_kv, kept, d_h) with kept ≤ sinks + window − 1 between steps; ``positions`` are
    their absolute positions (kept,).
    """

    def __init__(self, window: int, *, sinks: int = 0) -> None:
        super().__init__()
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an integer >= 1 (the tokens a step attends, itself included); got {window!r}")
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an integer >= 0; got {sinks!r}")
        self.window, self.sinks = window, sinks
        self.positions = torch.zeros(0, dtype=torch.long)

    @property
    def keys(self) -> torch.Tensor | None:
        return self._k

    @property
    def values(self) -> torch.Tensor | None:
        return self._v

    def chunk_mask(self, n: int, device: torch.device | str | None = None) -> torch.Tensor:
        """(1, 1, n, kept + n) bool for the next ``n`` tokens: True where a new query may attend (its
        sinks, its window, nothing after it). Pass it as ``mask=`` for a chunk of more than one token.

        Four dimensions, (b, h, q, k) with b = h = 1, so that no batch size can make it look like a
        (b, k) padding mask (a chunk of n tokens in a batch of n)."""
        q_pos = torch.arange(self.length, self.length + n, device=device)[:, None]  # (n, 1)
        k_pos = torch.cat([self.positions.to(device), q_pos[:, 0]])[None, :]  # (1, kept + n)
        allow = (k_pos <= q_pos) & ((k_pos < self.sinks) | (k_pos > q_pos - self.window))  # (n, kept + n)
        return allow[None, None]

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v (b, h_kv, n, d_h); return kept + new; then evict down to sinks + window − 1."""
        _check_update(self._k, k, v)
        n = k.shape[2]
        new_pos = torch.arange(self.length, self.length + n)
        k_all = k if self._k is None else torch.cat([self._k, k], dim=2)  # (b, h_kv, kept + n, d_h)
        v_all = v if self._v is None else torch.cat([self._v, v], dim=2)
        pos = torch.cat([self.positions, new_pos])
        self.length += n
        keep = (pos < self.sinks) | (pos > self.length - self.window)  # sinks and the last window − 1
        if bool(keep.all()):
            self._k, self._v, self.positions = k_all, v_all, pos
        else:
            idx = keep.nonzero()[:, 0].to(k.device)
            self._k, self._v = k_all.index_select(2, idx), v_all.index_select(2, idx)
            self.positions = pos[keep]
        return k_all, v_all

    def buffers(self) -> NoReturn:  # noqa: D102
        raise NotImplementedError("a WindowCache evicts: it has no growing buffers; use LayerCache for beam search")

    @classmethod
    def from_buffers(cls, k: torch.Tensor | None, v: torch.Tensor | None, length: int) -> NoReturn:  # noqa: D102
        raise NotImplementedError("a WindowCache is not built from buffers; use LayerCache.from_buffers")

    def reset(self) -> None:
        super().reset()
        self.positions = torch.zeros(0, dtype=torch.long)

    def __repr__(self) -> str:
        kept = 0 if self._k is None else self._k.shape[2]
        return f"WindowCache(window={self.window}, sinks={self.sinks}, length={self.length}, kept={kept})"


class KVCache:
    """One layer cache per layer: ``cache[i]`` is layer i's; ``cache.length`` the tokens seen.

    ``window=None`` (default): unbounded ``LayerCache``s; ``window=w``: a sliding window of w tokens
    (``WindowCache``), with ``sinks=s`` the first s tokens kept too (StreamingLLM).
    """

    def __init__(self, num_layers: int, *, window: int | None = None, sinks: int = 0) -> None:
        num_layers = _checks.integer("num_layers", num_layers)
        if window is None and sinks:
            raise ValueError(f"sinks={sinks} needs a window (sinks + window, StreamingLLM); pass window=w too")
        self.window, self.sinks = window, sinks
        self.layers = [LayerCache() if window is None else WindowCache(window, sinks=sinks) for _ in range(num_layers)]

    def __getitem__(self, i: int) -> LayerCache:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def length(self) -> int:
        return self.layers[0].length

    def reset(self) -> None:
        for layer in self.layers:
            layer.reset()

    def __repr__(self) -> str:
        policy = "" if self.window is None else f", window={self.window}, sinks={self.sinks}"
        return f"KVCache(layers={len(self.layers)}, length={self.length}{policy})"


__all__ = ["LayerCache", "WindowCache", "KVCache", "MemoryCache"]
