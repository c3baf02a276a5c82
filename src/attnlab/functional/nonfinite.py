"""The non-finite rule, written once for every mechanism: masked NaN/±inf never reach an output.

    x' = x where finite, else 0         one pass: read x, write x', flag the rows that held one
    out_i = NaN    if row i may attend a flagged key/value row, or its own query was flagged
    out_i = 0      if row i may attend nothing (it wins over NaN)

Keys and values at masked positions never influence an output or a gradient, even when they
are NaN or inf: a fused kernel multiplies a masked weight (exactly 0) by its value, and
0 · NaN = NaN, so every kernel (SDPA's flash and cuDNN kernels, flex, the CPU tiles) leaks a
masked NaN into the rows that share its tile unless the inputs are cleaned first.

``sanitize`` is that cleaning without a host read: ``nan_to_num`` (read once, write once, at
memory speed) and the row flags as one matrix-vector product (a second read). Its gradient is
the identity: every gradient that reaches a cleaned entry is already
zero, because the rows that could have used it are set to NaN by ``finish_nonfinite`` (a
``torch.where``, which passes them no gradient) and the rows that may not attend it weigh it
by exactly 0. So the rule costs two reads and one write of each guarded tensor forward, and
nothing backward.

Shapes: x (..., n, d) → x' (..., n, d), flags (..., n) bool (True = the row held NaN/±inf).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import _checks


def nonfinite_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., n, d) → (..., n) bool: rows holding a NaN or ±inf.

    One summation pass (in float32 at least) instead of an element-wise test: a NaN or
    inf makes the sum non-finite. A finite row whose sum overflows float32 (entries
    near 1e38) is counted as non-finite too.
    """
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return ~torch.isfinite(x.sum(-1, dtype=acc))


def zero_nonfinite_entries(x: torch.Tensor) -> torch.Tensor:
    """NaN and ±inf entries → 0 (their gradient is zero); finite entries pass through."""
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def flag_rows(x: torch.Tensor) -> torch.Tensor:
    """(..., n, d) → (..., n) bool: rows holding a NaN or ±inf, as one matrix-vector product
    (x · 1, accumulated in float32 by the GEMV: a read of x at memory speed, no reduction kernel).
    A finite row whose sum overflows is flagged too (entries near the dtype's largest value)."""
    if _checks.tracing():  # inside torch.compile: a reduction that fuses with the cleaning's read
        return nonfinite_rows(x)
    s = x @ x.new_ones(x.shape[-1])  # (..., n)
    return s.mul(0).ne(0)  # 0 · s is 0 where s is finite, NaN where it is ±inf or NaN: two small operations


class _Clean(torch.autograd.Function):
    """NaN/±inf → 0 forward, the identity backward (see the module docstring)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, zero_rows: torch.Tensor | None) -> torch.Tensor:
        clean = zero_nonfinite_entries(x)
        return clean if zero_rows is None else clean.masked_fill_(zero_rows.unsqueeze(-1), 0.0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def sanitize(x: torch.Tensor, zero_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., n, d) → (x with NaN/±inf entries zeroed, (..., n) bool: the rows that held one).

    Two reads of x and one write: ``nan_to_num`` (an element-wise kernel at memory speed) and
    ``flag_rows`` (a GEMV). ``zero_rows`` (broadcastable to (..., n), bool): rows to zero whole as
    well (the query rows that may attend nothing). With a gradient, the cleaning's backward is the
    identity; under ``torch.compile`` the plain operations are traced and fuse with their neighbours."""
    if zero_rows is not None:
        zero_rows = zero_rows.expand(x.shape[:-1])
    bad = flag_rows(x)
    if x.requires_grad and torch.is_grad_enabled() and not _checks.tracing():
        return _Clean.apply(x, zero_rows), bad
    clean = zero_nonfinite_entries(x)
    if zero_rows is not None:
        clean = clean.masked_fill(zero_rows.unsqueeze(-1), 0.0)
    return clean, bad


def zero_nonfinite(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first half of the non-finite rule, for every kernel that attends with a mask or a pattern.

    Returns (query, key, value with their non-finite entries zeroed, ``bad_q`` (..., q) bool: the
    query rows that held one, ``bad`` (..., k) bool: the key/value rows that held one). The caller
    sets to NaN the output rows it lets attend a ``bad`` row, and the ``bad_q`` rows (``finish_nonfinite``).
    """
    bad_q, bad = nonfinite_rows(query), nonfinite_rows(key) | nonfinite_rows(value)  # (..., q), (..., k)
    return zero_nonfinite_entries(query), zero_nonfinite_entries(key), zero_nonfinite_entries(value), bad_q, bad


def map_finite_rows(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for a row-wise ``fn`` (a projection, a per-token norm; (..., n, d) → (..., n, d')),
    the rows of x holding a NaN or ±inf kept out of ``fn`` and its backward: they come out all NaN
    (so the rule above still sees them), and ``fn``'s parameters and x get finite gradients (zero from
    those rows). A key made by a projection, k_j = W h_j, sends W the gradient Σ_j ∂k_j ⊗ h_j, and
    0 · NaN = NaN: without this a NaN token at a masked position would still make W's gradient NaN."""
    bad = nonfinite_rows(x).unsqueeze(-1)  # (..., n, 1)
    nan = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
    return torch.where(bad, nan, fn(zero_nonfinite_entries(x)))


def finish_nonfinite(out: torch.Tensor, hit: torch.Tensor | None, dead: torch.Tensor | None) -> torch.Tensor:
    """One pass over the output: NaN in the rows that attended (or are) a non-finite input,
    zeros in the fully masked rows (which win: a row that may attend nothing is zero)."""
    if hit is None and dead is None:
        return out
    if hit is None:
        assert dead is not None  # (the both-None case returned above)
        return torch.where(dead, 0.0, out)
    hit = hit.unsqueeze(-1)  # (..., q|1, 1)
    if dead is None:
        if not (out.requires_grad and torch.is_grad_enabled()) and hit.shape[:-1] == out.shape[:-1]:
            return out.masked_fill_(hit, float("nan"))  # the kernel's fresh output, in place: no new tensor
        return torch.where(hit, float("nan"), out)
    nan = torch.full((), float("nan"), dtype=out.dtype, device=out.device)
    return torch.where(hit | dead, torch.where(dead, 0.0, nan), out)


def host_checks(t: torch.Tensor) -> bool:
    """True where reading a value into Python synchronises no device: CPU tensors, run eagerly.

    There ``attention`` looks before it guards: when every input is finite (one summation pass)
    the guard's copies are skipped, and with no fully masked row the mask is used as given.
    On other devices and under ``torch.compile`` the branch-free path runs (no host reads)."""
    return t.device.type == "cpu" and not _checks.tracing()


__all__ = ["sanitize", "flag_rows", "map_finite_rows", "nonfinite_rows", "zero_nonfinite_entries", "zero_nonfinite", "finish_nonfinite", "host_checks"]
