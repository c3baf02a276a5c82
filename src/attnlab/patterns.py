"""Sparse attention patterns: which keys each query may attend, as composable objects.

Full self-attention over n positions costs O(n²). The second tutorial (§5) names the
remedies, each a *pattern* of allowed (query i, key j) pairs:

=====================================  =================================================  ======================
pattern                                allowed when                                        paper
=====================================  =================================================  ======================
``full()``                             always                                              Vaswani et al. 2017
``causal()``                           j ≤ i                                               Vaswani et al. 2017
``sliding_window(before, after)``      i − before ≤ j ≤ i + after                          Longformer, local attn
``dilated_window(size, dilation)``     j = i + m·dilation, |m| ≤ size                      Longformer (dilated)
``strided(stride)``                    |i − j| < stride  or  (i − j) mod stride = 0        Sparse Transformer
``fixed(block, summary=1)``            ⌊i/l⌋ = ⌊j/l⌋  or  j mod l ≥ l − summary            Sparse Transformer
``global_tokens(indices)``             i ∈ G  or  j ∈ G                                    Longformer
``random_blocks(per_row, block, s)``   block (⌊i/l⌋, ⌊j/l⌋) is one of per_row random ones  BigBird
``block_sparse(layout, block)``        layout[⌊i/l⌋, ⌊j/l⌋]                                 Sparse Transformer
``documents(lengths, causal)``         doc(i) = doc(j)  (and j ≤ i when causal)            packed sequences
``neighborhood_2d(H, W, kernel, dil)`` j in the k × k window of i on the H × W grid         Hassani et al. 2023
``a & b``, ``a | b``                   both allow / either allows
=====================================  =================================================  ======================

(Sparse Transformer: Child et al. 2019, https://arxiv.org/abs/1904.10509;
Longformer: Beltagy et al. 2020, https://arxiv.org/abs/2004.05150; BigBird:
Zaheer et al. 2020, https://arxiv.org/abs/2007.14062.) The second tutorial's *dynamic*
selection, top-k (each query keeps its k highest-scoring keys), depends on the
content, so it lives with its kernel (``attnlab.kernels.top_k``, ``TopK.mask``,
``attnlab.kernels.topk_attention``).

Each pattern is an index function ``allows(q_idx, kv_idx, n) -> bool`` over
broadcasting integer tensors (the shape of ``flex_attention``'s ``mask_mod``),
and can

* ``materialize(n)``: the dense (n, n) bool mask (True = may attend), for tests,
  explanations and pictures; ``mask & key_mask[:, None, None, :]`` adds padding;
* ``density(n)``: the fraction of the n² pairs it allows (computed without an
  n × n tensor);
* ``blocks(n, block)``: the (nnz, 2) list of non-empty (query block, key block)
  tiles, what ``attnlab.kernels.block_sparse_attention`` computes.

Window semantics, exactly: query i sees key j iff ``i - before <= j <= i + after``
(both ends inclusive, ``before + after + 1`` keys in the interior). A window
looks back *or* forward: ``sliding_window(2, 2)`` is not ``sliding_window(2, 0) &
sliding_window(0, 2)`` (that AND is the single diagonal, the pitfall of
lucidrains/local-attention#5); it is their ``|``.  A causal local window is
``sliding_window(w, 0)``.

``documents`` is the block-diagonal mask of packed variable-length sequences (FlashAttention's
``cu_seqlens``, xFormers' ``BlockDiagonalMask``): documents of the given lengths laid end to
end, each attending only itself. ``neighborhood_2d`` is neighbourhood attention (Hassani et
al. 2023, https://arxiv.org/abs/2204.07143; dilated: https://arxiv.org/abs/2209.15001) over the
row-major positions of an H × W grid, with NATTEN's window semantics: the window of a query
near a border is shifted to stay inside the grid (every query sees exactly kernel² keys when
dilation·(kernel − 1) < the side; with dilation, within its dilation group).

Caveats: patterns are for self-attention (q = k = n). ``random_blocks`` draws
its layout from ``seed`` for each n (the same n gives the same layout).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence

import torch

from . import _checks

# Largest number of (query, key) pairs evaluated at once by the generic block layout.
_EVAL_CHUNK = 1 << 23


def _n_blocks(n: int, block: int) -> int:
    return -(-n // block)


_positive = _checks.integer  # an integer >= minimum (default 1), bools and floats refused


def _lengths(lengths: object) -> torch.Tensor:
    """Document lengths: a non-empty 1-D sequence (or tensor) of integers >= 0 → (docs,) long."""
    given = lengths
    if hasattr(lengths, "__array__") and not isinstance(lengths, torch.Tensor):  # a NumPy array
        lengths = torch.as_tensor(lengths)
    if isinstance(lengths, torch.Tensor):
        integral = not (lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool)
        if lengths.dim() != 1 or not integral or lengths.device.type == "meta":
            raise ValueError(
                "documents needs a non-empty list of lengths >= 0 (a 1-D integer tensor on a device that "
                f"holds values); got a {lengths.dtype} tensor of shape {_checks.shape(lengths)} on {lengths.device}"
            )
        lengths = lengths.tolist()
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
        raise ValueError(f"documents needs a non-empty list of lengths >= 0; got {given!r}")
    bad = [x for x in lengths if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0]
    if not len(lengths) or bad:
        raise ValueError(
            f"documents needs a non-empty list of lengths >= 0; got {list(lengths)!r}"
            + (f" ({bad[0]!r} is not an integer >= 0)" if bad else "")
        )
    return torch.tensor([int(x) for x in lengths], dtype=torch.long)


class _Value(type):
    """Patterns are values: once built, their fields cannot be set (a kernel's plan, kept on the pattern,
    can never describe another pattern than the one it was made for)."""

    def __call__(cls, *args: object, **kwargs: object) -> object:
        obj = super().__call__(*args, **kwargs)
        object.__setattr__(obj, "_built", True)
        return obj


class Pattern(metaclass=_Value):
    """A set of allowed (query, key) pairs over n positions; compose with ``&`` and ``|``.

    Immutable: setting a field of a built pattern raises ``AttributeError`` (build a new pattern), and
    the tensors it was given are its own copies."""

    def __setattr__(self, name: str, value: object) -> None:
        if self.__dict__.get("_built"):
            raise AttributeError(f"a pattern is immutable: {self!r} cannot take a new {name!r}; build a new pattern "
                                 f"instead (its kernel plans belong to the pattern they were made for)")
        object.__setattr__(self, name, value)

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        """Index function: bool tensor (broadcast of q_idx and kv_idx), True = may attend."""
        raise NotImplementedError

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        """(nb, nb) bool: a superset of the tiles that hold an allowed pair.

        The default evaluates ``allows`` everywhere (O(n²) time, chunked memory);
        patterns with a cheap closed form override it.
        """
        nb = _n_blocks(n, block)
        pad = nb * block
        kv = torch.arange(pad)
        rows = max(1, _EVAL_CHUNK // (pad * block))
        out = torch.zeros(nb, nb, dtype=torch.bool)
        for start in range(0, nb, rows):
            stop = min(nb, start + rows)
            q = torch.arange(start * block, stop * block)
            ok = self.allows(q[:, None], kv[None, :], n) & (q[:, None] < n) & (kv[None, :] < n)
            out[start:stop] = ok.reshape(stop - start, block, nb, block).any(3).any(1)
        return out

    # --- derived views -----------------------------------------------------

    def materialize(self, n: int, *, device: torch.device | str | None = None) -> torch.Tensor:
        """The dense (n, n) bool mask, True where query i may attend key j."""
        _positive("n", n, 0)
        i = torch.arange(n, device=device)
        return self.allows(i[:, None], i[None, :], n).expand(n, n).clone()  # (q, k)

    def tiles(self, q_blocks: torch.Tensor, k_blocks: torch.Tensor, n: int, block: int) -> torch.Tensor:
        """Element masks of tiles: q_blocks (R,), k_blocks (R, m) → (R, block, m·block) bool.

        Positions at or beyond n are never allowed (the kernel pads to whole blocks).
        """
        off = torch.arange(block)
        q = (q_blocks[:, None] * block + off).unsqueeze(-1)  # (R, B, 1)
        kv = (k_blocks[:, :, None] * block + off).flatten(1).unsqueeze(1)  # (R, 1, m·B)
        return self.allows(q, kv, n) & (q < n) & (kv < n)

    def blocks(self, n: int, block: int = 64) -> torch.Tensor:
        """(nnz, 2) long: the (query block, key block) tiles that hold an allowed pair."""
        _positive("n", n), _positive("block", block)
        cand = self.block_layout(n, block).nonzero()  # (c, 2)
        keep = torch.zeros(len(cand), dtype=torch.bool)
        step = max(1, _EVAL_CHUNK // (block * block))
        for s in range(0, len(cand), step):
            c = cand[s : s + step]
            keep[s : s + step] = self.tiles(c[:, 0], c[:, 1:], n, block).any(-1).any(-1)
        return cand[keep]

    def density(self, n: int, block: int = 64) -> float:
        """Allowed pairs / n², counted tile by tile (no n × n tensor)."""
        _positive("n", n)
        cand = self.block_layout(n, block).nonzero()
        total = 0
        step = max(1, _EVAL_CHUNK // (block * block))
        for s in range(0, len(cand), step):
            c = cand[s : s + step]
            total += int(self.tiles(c[:, 0], c[:, 1:], n, block).sum())
        return total / (n * n)

    def __and__(self, other: Pattern) -> Pattern:
        return Combined(self, _as_pattern(other), "and")

    def __or__(self, other: Pattern) -> Pattern:
        return Combined(self, _as_pattern(other), "or")


def _as_pattern(x: object) -> Pattern:
    if not isinstance(x, Pattern):
        raise ValueError(f"patterns combine with patterns (& and |); got {type(x).__name__}")
    return x


class Combined(Pattern):
    def __init__(self, a: Pattern, b: Pattern, op: str):
        self.a, self.b, self.op = a, b, op

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        x, y = self.a.allows(q_idx, kv_idx, n), self.b.allows(q_idx, kv_idx, n)
        return x & y if self.op == "and" else x | y

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        x, y = self.a.block_layout(n, block), self.b.block_layout(n, block)
        return x & y if self.op == "and" else x | y

    def __repr__(self) -> str:
        return f"({self.a!r} {'&' if self.op == 'and' else '|'} {self.b!r})"


class _Full(Pattern):
    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        return torch.ones_like(q_idx + kv_idx, dtype=torch.bool)

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        nb = _n_blocks(n, block)
        return torch.ones(nb, nb, dtype=torch.bool)

    def __repr__(self) -> str:
        return "full()"


class _Causal(Pattern):
    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        return kv_idx <= q_idx

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        nb = _n_blocks(n, block)
        return torch.ones(nb, nb, dtype=torch.bool).tril()

    def __repr__(self) -> str:
        return "causal()"


class _Band(Pattern):
    """Keys within a band [i − before, i + after] (a superset layout for the dilated window)."""

    before: int
    after: int

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        nb = _n_blocks(n, block)
        qb = torch.arange(nb)
        lo = (qb * block - self.before).clamp(min=0) // block  # first key block touched
        hi = (qb * block + block - 1 + self.after).clamp(max=n - 1) // block  # last key block
        kb = torch.arange(nb)
        return (kb[None, :] >= lo[:, None]) & (kb[None, :] <= hi[:, None])


class Window(_Band):
    def __init__(self, before: int, after: int):
        self.before, self.after = _positive("before", before, 0), _positive("after", after, 0)

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        d = kv_idx - q_idx
        return (d >= -self.before) & (d <= self.after)

    def __repr__(self) -> str:
        return f"sliding_window({self.before}, {self.after})"


class _Dilated(_Band):
    def __init__(self, size: int, dilation: int):
        self.size, self.dilation = _positive("size", size, 0), _positive("dilation", dilation)
        self.before = self.after = size * dilation

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        d = kv_idx - q_idx
        return (d.abs() <= self.size * self.dilation) & (d % self.dilation == 0)

    def __repr__(self) -> str:
        return f"dilated_window({self.size}, {self.dilation})"


class _Strided(Pattern):
    def __init__(self, stride: int):
        self.stride = _positive("stride", stride)

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        d = q_idx - kv_idx
        return (d.abs() < self.stride) | (d % self.stride == 0)

    def __repr__(self) -> str:
        return f"strided({self.stride})"


class _Fixed(Pattern):
    def __init__(self, block: int, summary: int):
        self.block = _positive("block", block)
        self.summary = _positive("summary", summary)
        if summary > block:
            raise ValueError(f"summary must be <= block; got summary={summary}, block={block}")

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        same = (q_idx // self.block) == (kv_idx // self.block)
        return same | (kv_idx % self.block >= self.block - self.summary)

    def __repr__(self) -> str:
        return f"fixed({self.block}, summary={self.summary})"


class GlobalTokens(Pattern):
    def __init__(self, indices: Sequence[int] | torch.Tensor):
        idx = torch.as_tensor(indices, dtype=torch.long).flatten()
        if idx.numel() and int(idx.min()) < 0:
            raise ValueError(f"global token indices must be >= 0; got {idx.tolist()}")
        self.indices = idx.unique()

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        g = self.indices.to(q_idx.device)
        return torch.isin(q_idx, g) | torch.isin(kv_idx, g)

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        nb = _n_blocks(n, block)
        hit = torch.zeros(nb, dtype=torch.bool)
        g = self.indices[self.indices < n]
        hit[g // block] = True
        return hit[:, None] | hit[None, :]

    def __repr__(self) -> str:
        return f"global_tokens({self.indices.tolist()})"


class _BlockLayout(Pattern):
    """Allowed pairs given by a block layout; ``layout_for(n)`` gives the (nb, nb) bool layout."""

    block: int

    def layout_for(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        lay = self.layout_for(n).to(q_idx.device)
        nb = lay.shape[0]
        qi = (q_idx // self.block).clamp(0, nb - 1)
        ki = (kv_idx // self.block).clamp(0, nb - 1)
        inside = (q_idx < nb * self.block) & (kv_idx < nb * self.block)
        return lay[qi, ki] & inside

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        if block == self.block:
            return self.layout_for(n).clone()
        return super().block_layout(n, block)


class _Given(_BlockLayout):
    def __init__(self, layout: torch.Tensor, block: int):
        _checks.tensor("layout", layout, 2)
        if layout.dtype != torch.bool or layout.shape[0] != layout.shape[1]:
            raise ValueError(f"layout must be a square bool tensor (nb, nb); got {_checks.shape(layout)} {layout.dtype}")
        self.layout, self.block = layout.detach().to("cpu", copy=True), _positive("block", block)

    def layout_for(self, n: int) -> torch.Tensor:
        nb = _n_blocks(n, self.block)
        if nb != self.layout.shape[0]:
            raise ValueError(
                f"block_sparse layout {_checks.shape(self.layout)} with block={self.block} covers "
                f"{(self.layout.shape[0] - 1) * self.block + 1}..{self.layout.shape[0] * self.block} positions; got n={n}"
            )
        return self.layout

    def __repr__(self) -> str:
        return f"block_sparse(<{self.layout.shape[0]}x{self.layout.shape[0]} layout>, {self.block})"


class _Random(_BlockLayout):
    def __init__(self, per_row: int, block: int, seed: int):
        self.per_row, self.block = _positive("per_row", per_row, 0), _positive("block", block)
        self.seed = int(seed)
        self._cache: dict[int, torch.Tensor] = {}

    def layout_for(self, n: int) -> torch.Tensor:
        if n not in self._cache:
            nb = _n_blocks(n, self.block)
            g = torch.Generator().manual_seed(self.seed)
            pick = torch.rand(nb, nb, generator=g).argsort(-1)[:, : min(self.per_row, nb)]
            lay = torch.zeros(nb, nb, dtype=torch.bool)
            lay.scatter_(1, pick, True)
            self._cache[n] = lay
        return self._cache[n]

    def __repr__(self) -> str:
        return f"random_blocks({self.per_row}, {self.block}, seed={self.seed})"


class Documents(Pattern):
    """Block-diagonal: packed documents of ``lengths`` (positions beyond their sum attend nothing)."""

    def __init__(self, lengths: Sequence[int] | torch.Tensor, causal: bool = False):
        lens = _lengths(lengths)
        self.lengths, self.causal = lens, bool(causal)
        self.cu_seqlens = torch.cat([lens.new_zeros(1), lens.cumsum(0)])  # (docs + 1,) starts, then the total
        self.total = int(self.cu_seqlens[-1])

    def doc_of(self, idx: torch.Tensor) -> torch.Tensor:
        """The document of each position (−1 at and beyond the total length)."""
        ends = self.cu_seqlens[1:].to(idx.device)
        doc = torch.bucketize(idx, ends, right=True)
        return torch.where((idx >= 0) & (idx < self.total), doc, torch.full_like(doc, -1))

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        dq, dk = self.doc_of(q_idx), self.doc_of(kv_idx)
        ok = (dq == dk) & (dq >= 0)
        return ok & (kv_idx <= q_idx) if self.causal else ok

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        nb = _n_blocks(n, block)
        start = torch.arange(nb) * block
        end = (start + block - 1).clamp(max=max(0, min(n, self.total) - 1))
        first, last = self.doc_of(start), self.doc_of(end)  # documents a block touches: first … last
        last = torch.where(first < 0, torch.full_like(last, -2), last)  # blocks past the end touch none
        layout = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])
        return layout.tril() if self.causal else layout

    def __repr__(self) -> str:
        return f"documents({self.lengths.tolist()}{', causal=True' if self.causal else ''})"


class Neighborhood2D(Pattern):
    """NATTEN's 2-D neighbourhood over the row-major positions of an H × W grid."""

    def __init__(self, height: int, width: int, kernel: int, dilation: int = 1):
        self.height, self.width = _positive("height", height, 0), _positive("width", width, 0)
        self.kernel, self.dilation = _positive("kernel", kernel), _positive("dilation", dilation)
        if kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (a window centred on the query); got {kernel}")
        # A side shorter than kernel·dilation gives every query its whole dilation group along it.

    @staticmethod
    def _start(
        i: torch.Tensor, side: int, kernel: int, dilation: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """First window index, dilation group and window length along one axis (NATTEN: shifted
        to stay inside, per dilation group)."""
        group = i % dilation
        count = (side - group + dilation - 1) // dilation  # positions in this dilation group
        j = i // dilation  # index inside the group
        half = kernel // 2
        k = torch.minimum(torch.full_like(count, kernel), count)
        s = (j - half).clamp(min=0)
        s = torch.minimum(s, count - k)
        return s, group, k

    def _axis_ok(self, qi: torch.Tensor, ki: torch.Tensor, side: int) -> torch.Tensor:
        s, group, k = self._start(qi, side, self.kernel, self.dilation)
        kj = ki // self.dilation
        return (ki % self.dilation == group) & (kj >= s) & (kj < s + k) & (ki >= 0) & (ki < side)

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        W = self.width
        inside = (q_idx >= 0) & (q_idx < self.height * W) & (kv_idx >= 0) & (kv_idx < self.height * W)
        qr, qc, kr, kc = q_idx // W, q_idx % W, kv_idx // W, kv_idx % W
        return inside & self._axis_ok(qr, kr, self.height) & self._axis_ok(qc, kc, W)

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        # Rows of a query block span rows r0 … r1; their windows reach rows within ±kernel·dilation.
        nb = _n_blocks(n, block)
        start = torch.arange(nb) * block
        r0, r1 = start // self.width, (start + block - 1).clamp(max=n - 1) // self.width
        reach = self.kernel * self.dilation
        lo, hi = ((r0 - reach).clamp(min=0) * self.width), ((r1 + reach + 1) * self.width - 1)
        k_first, k_last = start, start + block - 1
        return (k_last[None, :] >= lo[:, None]) & (k_first[None, :] <= hi[:, None])

    def __repr__(self) -> str:
        return f"neighborhood_2d({self.height}, {self.width}, kernel={self.kernel}, dilation={self.dilation})"


def full() -> Pattern:
    """Every query attends every key (dense attention as a pattern)."""
    return _Full()


def causal() -> Pattern:
    """Query i attends keys j ≤ i."""
    return _Causal()


def sliding_window(before: int, after: int | None = None) -> Pattern:
    """Local attention: query i attends keys i − before ≤ j ≤ i + after (after defaults to before)."""
    return Window(before, before if after is None else after)


def dilated_window(size: int, dilation: int) -> Pattern:
    """Keys i + m·dilation for |m| ≤ size: 2·size + 1 keys spread over 2·size·dilation + 1 positions."""
    return _Dilated(size, dilation)


def strided(stride: int) -> Pattern:
    """Sparse Transformer's strided pattern (both heads merged): |i − j| < stride or stride | (i − j).

    ``strided(l) & causal()`` is the paper's autoregressive form.
    """
    return _Strided(stride)


def fixed(block: int, summary: int = 1) -> Pattern:
    """Sparse Transformer's fixed pattern: the same block of ``block`` positions, or a summary column.

    Summary columns are the last ``summary`` positions of every block (the paper's c).
    """
    return _Fixed(block, summary)


def global_tokens(indices: Sequence[int] | torch.Tensor) -> Pattern:
    """Longformer's global attention: the tokens at ``indices`` see, and are seen by, every position."""
    return GlobalTokens(indices)


def random_blocks(per_row: int, block: int = 64, seed: int = 0) -> Pattern:
    """BigBird's random attention: each query block attends ``per_row`` key blocks drawn with ``seed``."""
    return _Random(per_row, block, seed)


def block_sparse(layout: torch.Tensor, block: int) -> Pattern:
    """A given (nb, nb) bool block layout: tile (I, J) is allowed where ``layout[I, J]``."""
    return _Given(layout, block)


def documents(lengths: Sequence[int] | torch.Tensor, causal: bool = False) -> Documents:
    """Packed sequences: documents of ``lengths`` laid end to end, each attending only itself
    (block diagonal); ``causal=True`` also needs j ≤ i (packed language-model training)."""
    return Documents(lengths, causal)


def neighborhood_2d(height: int, width: int, kernel: int, dilation: int = 1) -> Neighborhood2D:
    """2-D neighbourhood attention over an H × W grid (row-major positions): the kernel × kernel
    window around each query (every ``dilation``-th position), shifted inside at the borders (NATTEN)."""
    return Neighborhood2D(height, width, kernel, dilation)


# The patterns by name, for configuration files (explain examples, the CLI).
BUILDERS: dict[str, Callable[..., Pattern]] = {
    "full": full,
    "causal": causal,
    "sliding_window": sliding_window,
    "dilated_window": dilated_window,
    "strided": strided,
    "fixed": fixed,
    "global_tokens": global_tokens,
    "random_blocks": random_blocks,
}


def from_spec(items: Sequence[dict], combine: str = "or") -> Pattern:
    """Build a pattern from ``[{"kind": "sliding_window", "args": [1, 1]}, ...]`` joined by ``|`` or ``&``."""
    if combine not in ("or", "and") or not items:
        raise ValueError(f"a pattern spec needs at least one item and combine 'or' or 'and'; got {len(items)} items, {combine!r}")
    out: Pattern | None = None
    for it in items:
        kind = it.get("kind") if isinstance(it, dict) else None
        if kind not in BUILDERS:
            raise ValueError(f"pattern kind must be one of {', '.join(BUILDERS)}; got {kind!r}")
        p = BUILDERS[kind](*[int(a) if not isinstance(a, list) else [int(x) for x in a] for a in it.get("args", [])])
        out = p if out is None else (out | p if combine == "or" else out & p)
    assert out is not None  # items is not empty
    return out


__all__ = [
    "BUILDERS",
    "from_spec",
    "Pattern",
    "Combined",
    "Window",
    "GlobalTokens",
    "full",
    "causal",
    "sliding_window",
    "dilated_window",
    "strided",
    "fixed",
    "global_tokens",
    "random_blocks",
    "block_sparse",
    "Documents",
    "Neighborhood2D",
    "documents",
    "neighborhood_2d",
]
