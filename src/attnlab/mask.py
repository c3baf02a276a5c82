"""``attnlab.Mask``: a mask as a value, built once, passed to every layer.

PyTorch's ``BlockMask`` and Hugging Face's mask builders show the way: the mask is built once,
outside the layers, from what the caller has (lengths, a causal flag, packed documents), it is
validated then, and it knows what it is, so a layer never guesses a mask's meaning from its shape
and a call never re-derives it.

    m = attnlab.Mask.padding(lengths, 16) & attnlab.Mask.causal()   # built once per batch
    out, _ = attnlab.attention(q, k, v, mask=m)                     # every layer takes the same value

Convention (the library's one): True = may attend; a bias is added to the scores. Shapes: ``b``
batch, ``h`` heads, ``q`` query length, ``k`` key length. Constructors:

| constructor                                  | allows query i to attend key j when            |
|----------------------------------------------|------------------------------------------------|
| ``Mask.padding(lengths, k)``                 | j < lengths[b] (key padding, lengths or (b, k) bool) |
| ``Mask.causal(q, k, align="bottom-right")``  | j <= i + (k - q) (bottom-right) or j <= i (top-left) |
| ``Mask.documents(cu_seqlens)``               | i and j lie in the same packed document         |
| ``Mask.pattern(pattern, n)``                 | ``pattern`` allows (i, j) (``attnlab.patterns``) |
| ``Mask.dense(allowed)``                      | ``allowed[..., i, j]`` (bool, broadcast to (b, h, q, k)) |
| ``Mask.bias(bias)``                          | always; ``bias[..., i, j]`` is added (``-inf`` masks) |
| ``a & b`` / ``a | b``                        | both allow / either allows (bias: only with ``&``, added) |

A Mask is immutable: its attributes cannot be set, and the tensors it holds are its own copies.
What it needs at a call (the dense form for a shape, the rows that may attend nothing) it makes on
first use and keeps: its plans belong to it, so they can never describe another mask.
``causal`` without sizes (``Mask.causal()``) is aligned to each call's (q, k).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import _checks, masks, patterns

ALIGNS = ("bottom-right", "top-left")


class _Part:
    """One condition of a mask: its dense form for a call of q queries and k keys."""

    b: int | None = None
    q: int | None = None
    k: int | None = None

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:  # (b|1, 1, q|1, k)
        raise NotImplementedError


class _Keys(_Part):
    """Key padding: ``keep`` (b, k) bool, True = a real key."""

    def __init__(self, keep: torch.Tensor, lengths: tuple[int, ...] | None):
        self.keep, self.lengths = keep, lengths
        self.b, self.k = keep.shape
        self.empty = bool((~keep).all(-1).any()) if _values_readable(keep) else None  # a sequence with no key

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        return self.keep[:, None, None, :].to(device)  # (b, 1, 1, k)

    def __repr__(self) -> str:
        return f"padding(lengths={list(self.lengths)})" if self.lengths is not None else f"padding(keep {tuple(self.keep.shape)})"


class _Causal(_Part):
    def __init__(self, q: int | None, k: int | None, align: str):
        self.q, self.k, self.align = q, k, align

    def offset(self, q_len: int, k_len: int) -> int:
        return k_len - q_len if self.align == "bottom-right" else 0

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        i = torch.arange(q_len, device=device).unsqueeze(-1)
        return (torch.arange(k_len, device=device) <= i + self.offset(q_len, k_len))[None, None]  # (1, 1, q, k)

    def __repr__(self) -> str:
        sizes = "" if self.q is None else f"{self.q}, {self.k}, "
        return f"causal({sizes}align={self.align!r})"


class _Tensor(_Part):
    """A dense bool mask or an additive bias, broadcast to (b, h, q, k) (kept with 4 dimensions)."""

    def __init__(self, t: torch.Tensor, what: str):
        self.t, self.what = t, what
        b, _, q, k = t.shape
        self.b, self.q, self.k = (None if b == 1 else b), (None if q == 1 else q), (None if k == 1 else k)

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        return self.t.to(device)

    def __repr__(self) -> str:
        return f"{self.what}({tuple(self.t.shape)}, {self.t.dtype})"


class _Documents(_Part):
    """Packed documents: ``cu`` (docs + 1,) boundaries; the dense form is made only when asked for."""

    def __init__(self, cu: torch.Tensor):
        self.cu, self.lengths = cu, tuple(int(x) for x in (cu[1:] - cu[:-1]).tolist())
        self.q = self.k = int(cu[-1])

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        doc = torch.bucketize(torch.arange(q_len, device=device), self.cu[1:].to(device), right=True)  # (n,)
        return (doc[:, None] == doc[None, :])[None, None]  # (1, 1, n, n)

    def __repr__(self) -> str:
        return f"documents(cu_seqlens={self.cu.tolist()})"


class _Pattern(_Part):
    def __init__(self, pattern: patterns.Pattern, n: int):
        self.pattern, self.q, self.k = pattern, n, n

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        return self.pattern.materialize(q_len, device=device)[None, None]  # (1, 1, n, n)

    def __repr__(self) -> str:
        return f"pattern({self.pattern!r}, n={self.q})"


class _Any(_Part):
    """``a | b``: either mask allows."""

    def __init__(self, a: Mask, b: Mask):
        self.a, self.b_mask = a, b
        self.b, self.q, self.k = _agree("b", a.b, b.b), _agree("q", a.q, b.q), _agree("k", a.k, b.k)

    def dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        return self.a._dense(q_len, k_len, device) | self.b_mask._dense(q_len, k_len, device)

    def __repr__(self) -> str:
        return f"({self.a!r} | {self.b_mask!r})"


def _values_readable(t: torch.Tensor) -> bool:
    return t.device.type != "meta" and not _checks.tracing()


def _agree(name: str, a: int | None, b: int | None) -> int | None:
    if a is not None and b is not None and a != b:
        raise ValueError(f"masks of different {name} do not combine: {name}={a} and {name}={b}")
    return a if a is not None else b


def _frozen(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()  # the mask's own copy: a later change to the caller's tensor cannot reach it


class Mask:
    """An attention mask as an immutable value (see the module docstring for the constructors).

    Attributes: ``b``, ``q``, ``k`` (sizes it fixes, None where it broadcasts), ``device``,
    ``is_causal`` (nothing but a causal condition), ``keys`` ((b, k) bool key padding when that is all
    it is, else None), ``lengths`` (the padding's lengths when given so).
    """

    __slots__ = ("_parts", "_plans", "b", "q", "k", "device")
    _parts: tuple[_Part, ...]
    _plans: dict[tuple, Any]
    b: int | None
    q: int | None
    k: int | None
    device: torch.device | None

    def __init__(self, parts: Sequence[_Part], device: torch.device | None = None):
        object.__setattr__(self, "_parts", tuple(parts))
        object.__setattr__(self, "_plans", {})
        sizes = {"b": None, "q": None, "k": None}
        for p in self._parts:
            for name in sizes:
                sizes[name] = _agree(name, sizes[name], getattr(p, name))
        for name, value in sizes.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "device", device)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Mask is immutable: build a new one instead of setting {name!r}")

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def padding(cls, lengths: torch.Tensor | Sequence[int], k: int | None = None) -> Mask:
        """Key padding from (b,) lengths (keys ``j < lengths[b]`` are real) or from a (b, k) bool
        (True = a real key). ``k``: the key length (default: the longest length)."""
        given = torch.as_tensor(lengths)
        if given.dtype == torch.bool:
            if given.dim() != 2:
                raise ValueError(f"a bool padding mask must be (b, k), True = a real key; got shape {_checks.shape(given)}")
            if k is not None and k != given.shape[1]:
                raise ValueError(f"k={k} does not match the (b, k) padding mask's k={given.shape[1]}")
            return cls([_Keys(_frozen(given), None)], given.device)
        keep = masks.padding(given, k)  # (b, k); validates the lengths
        readable = _values_readable(given)
        return cls([_Keys(keep, tuple(int(n) for n in given.tolist()) if readable else None)], keep.device)

    @classmethod
    def causal(cls, q: int | None = None, k: int | None = None, *, align: str = "bottom-right") -> Mask:
        """Causal: query i attends key j <= i + (k - q) (``"bottom-right"``: the queries are the last q
        positions, as in decoding and chunked prefill) or j <= i (``"top-left"``). Without sizes it
        fits every call, aligned to that call's q and k."""
        if align not in ALIGNS:
            raise ValueError(f"align must be one of {ALIGNS}; got {align!r}")
        if q is None and k is not None:
            raise ValueError("give q with k (Mask.causal(q, k)), or neither for a mask that fits every call")
        k = q if k is None else k
        for name, n in (("q", q), ("k", k)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
                raise ValueError(f"{name} must be an int >= 0; got {n!r}")
        return cls([_Causal(q, k, align)])

    @classmethod
    def documents(cls, cu_seqlens: torch.Tensor | Sequence[int]) -> Mask:
        """Packed documents (self-attention over n = cu_seqlens[-1] tokens): query i attends key j
        when both lie in one document; ``cu_seqlens`` = [0, end_1, end_2, ..., n], increasing."""
        cu = torch.as_tensor(cu_seqlens)
        if cu.dim() != 1 or cu.is_floating_point() or cu.dtype == torch.bool or cu.numel() < 1:
            raise ValueError(f"cu_seqlens must be a 1-d tensor of ints [0, ..., n]; got {cu.dtype} {_checks.shape(cu)}")
        if int(cu[0]) != 0 or bool((cu[1:] < cu[:-1]).any()):
            raise ValueError(f"cu_seqlens must start at 0 and never decrease; got {cu.tolist()}")
        return cls([_Documents(_frozen(cu).long())], cu.device)

    @classmethod
    def pattern(cls, pattern: patterns.Pattern, n: int) -> Mask:
        """A sparse pattern (``attnlab.patterns``) over n tokens (self-attention)."""
        if not isinstance(pattern, patterns.Pattern):
            raise ValueError(f"pattern must be an attnlab.patterns.Pattern; got {type(pattern).__name__}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be an int >= 0; got {n!r}")
        return cls([_Pattern(pattern, n)])

    @classmethod
    def dense(cls, allowed: torch.Tensor) -> Mask:
        """A bool tensor, True = may attend, broadcastable to (b, h, q, k): (q, k), (b, q, k) or 4-D."""
        return cls._tensor(allowed, "dense", torch.bool)

    @classmethod
    def bias(cls, bias: torch.Tensor) -> Mask:
        """An additive bias (float; ``-inf`` masks), broadcastable to (b, h, q, k): (q, k), (b, q, k) or 4-D."""
        return cls._tensor(bias, "bias", None)

    @classmethod
    def _tensor(cls, t: object, what: str, dtype: torch.dtype | None) -> Mask:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Mask.{what} takes a torch.Tensor; got {type(t).__name__}")
        if dtype is torch.bool and t.dtype != torch.bool:
            raise ValueError(f"Mask.dense takes a bool tensor (True = may attend); got dtype {t.dtype}")
        if dtype is None and not t.is_floating_point():
            raise ValueError(f"Mask.bias takes a floating-point tensor (an additive bias); got dtype {t.dtype}")
        if not 2 <= t.dim() <= 4:
            raise ValueError(f"Mask.{what} takes (q, k), (b, q, k) or (b, h, q, k); got shape {_checks.shape(t)}")
        if t.dim() == 4 and t.shape[1] != 1:
            raise ValueError(f"Mask.{what}: one mask for every head, (b, 1, q, k); got shape {_checks.shape(t)}")
        t4 = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)) if t.dim() < 4 else t
        if t.dim() == 3:
            t4 = t[:, None]
        if dtype is None:
            _checks.mask(t4, t4.shape)  # no NaN, no +inf
        return cls([_Tensor(_frozen(t4), what)], t.device)

    @classmethod
    def from_tensor(cls, mask: torch.Tensor, b: int, q_len: int, k_len: int) -> Mask:
        """A raw mask as the modules read it (``attnlab.masks.score_mask``: (k,), (b, k) padding, (q, k),
        (b, q, k), 4-D), converted once by the same rules."""
        smask, padding = masks.score_mask(mask, b, q_len, k_len)
        assert smask is not None
        if padding and smask.dtype == torch.bool:
            return cls.padding(smask.reshape(b, k_len))
        if smask.dim() != 4:
            raise ValueError(f"a mask of shape {_checks.shape(mask)} does not broadcast to the scores (b, h, q, k)")
        return cls.dense(smask) if smask.dtype == torch.bool else cls.bias(smask)

    # -- combinations --------------------------------------------------------------------------
    def __and__(self, other: Mask) -> Mask:
        if not isinstance(other, Mask):
            return NotImplemented
        return Mask(self._parts + other._parts, self.device or other.device)

    def __or__(self, other: Mask) -> Mask:
        if not isinstance(other, Mask):
            return NotImplemented
        if self.is_bias or other.is_bias:
            raise ValueError("a bias does not combine with |: add biases with &, or use bool masks")
        return Mask([_Any(self, other)], self.device or other.device)

    # -- what it is ----------------------------------------------------------------------------
    @property
    def is_causal(self) -> bool:
        return len(self._parts) == 1 and isinstance(self._parts[0], _Causal)

    @property
    def aligned_bottom_right(self) -> bool:
        """A causal mask aligned bottom-right (the queries are the last positions)."""
        return self.is_causal and self._parts[0].align == "bottom-right"  # type: ignore[attr-defined]

    @property
    def is_bias(self) -> bool:
        return any(isinstance(p, _Tensor) and p.t.is_floating_point() for p in self._parts)

    @property
    def keys(self) -> torch.Tensor | None:
        """(b, k) bool, True = a real key, when the mask is key padding and nothing else."""
        p = self._parts[0] if len(self._parts) == 1 else None
        return p.keep if isinstance(p, _Keys) else None

    @property
    def key_padding(self) -> torch.Tensor | None:
        """(b, k) bool, True = a real key: the key padding this mask holds (alone or with other conditions)."""
        keys = [p for p in self._parts if isinstance(p, _Keys)]
        if not keys:
            return None
        return keys[0].keep if len(keys) == 1 else torch.stack([p.keep for p in keys]).all(0)

    @property
    def document_lengths(self) -> tuple[int, ...] | None:
        """The packed documents' lengths, when the mask is ``Mask.documents`` and nothing else."""
        p = self._parts[0] if len(self._parts) == 1 else None
        return p.lengths if isinstance(p, _Documents) else None

    @property
    def lengths(self) -> tuple[int, ...] | None:
        p = self._parts[0] if len(self._parts) == 1 else None
        return p.lengths if isinstance(p, _Keys) else None

    def __repr__(self) -> str:
        return "Mask(" + " & ".join(repr(p) for p in self._parts) + ")"

    # -- at a call -----------------------------------------------------------------------------
    def check(self, b: int, q_len: int, k_len: int) -> None:
        """Refuse (``ValueError``) a call whose sizes the mask does not fit."""
        for name, mine, given in (("b", self.b, b), ("q", self.q, q_len), ("k", self.k, k_len)):
            if mine is not None and mine != given:
                raise ValueError(f"the mask {self!r} is for {name}={mine}; the call has {name}={given} "
                                 f"(b={b}, q={q_len}, k={k_len})")

    def _dense(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
        parts = [p.dense(q_len, k_len, device) for p in self._parts]
        return parts[0] if len(parts) == 1 else masks.combine(*parts)  # type: ignore[return-value]

    def plan(self, key: tuple, build: Callable[[], Any]) -> Any:
        """A plan of this mask (a dense form, a kernel's block layout, what a call needs): made by
        ``build()`` on first use under ``key`` (what determines it: sizes, device, dtype) and kept."""
        plans = self._plans
        if key not in plans:
            plans[key] = build()
        return plans[key]

    def tensor(self, q_len: int, k_len: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The dense form for q queries over k keys: bool (True = may attend) or a float bias,
        (b|1, 1, q|1, k). Made on first use for these sizes and kept."""
        device = torch.device(device) if device is not None else (self.device or torch.device("cpu"))
        key = ("dense", q_len, k_len, device)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._dense(q_len, k_len, device)
        return plan

    def empty_rows(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor | None:
        """(b|1, 1, q|1, 1) bool: the query rows that may attend nothing, or None when there is none
        (read once per size and kept; None also where values cannot be read and none is known)."""
        key = ("empty", q_len, k_len, device)
        if key not in self._plans:
            self._plans[key] = self._empty_rows(q_len, k_len, device)
        return self._plans[key]

    def _empty_rows(self, q_len: int, k_len: int, device: torch.device) -> torch.Tensor | None:
        if self.is_causal and k_len > 0 and self._parts[0].offset(q_len, k_len) >= 0:  # type: ignore[attr-defined]
            return None  # every row sees key 0
        keys = self._parts[0] if len(self._parts) == 1 else None
        if isinstance(keys, _Keys) and keys.empty is False:
            return None
        dense = self._dense(q_len, k_len, device) if self.is_causal else self.tensor(q_len, k_len, device)
        dead = ~masks.allowed(dense).any(-1, keepdim=True)  # (b|1, 1, q|1, 1)
        if dead.device.type != "meta" and not _checks.tracing() and not bool(dead.any()):
            return None
        return dead


__all__ = ["Mask"]
