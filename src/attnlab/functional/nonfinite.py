"""The non-finite rule, written once for every mechanism: masked NaN/±inf never reach an output.

    x' = x where finite, else 0         one pass: read x, write x', flag the rows that held one
    out_i = NaN    if row i may attend a flagged key/value row, or its own query was flagged
    out_i = 0      if row i may attend nothing (it wins over NaN)

Keys and values at masked positions never influence an output or a gradient, even when they
are NaN or inf: a fused kernel multiplies a masked weight (exactly 0) by its value, and
0 · NaN = NaN, so every kernel (SDPA's flash and cuDNN kernels, flex, the CPU tiles) leaks a
masked NaN into the rows that share its tile unless the inputs are cleaned first.

``sanitize`` is that cleaning as **one operator** (``attnlab::sanitize``): it reads its input
once and writes the cleaned copy once, with the row flags beside it. On CUDA it runs as one
fused kernel (``torch.compile`` of the few lines below, compiled once with dynamic shapes); on
the CPU and every other device as plain tensor operations; on the ``meta`` device it only gives
shapes. Its gradient is the identity: every gradient that reaches a cleaned entry is already
zero, because the rows that could have used it are set to NaN by ``finish_nonfinite`` (a
``torch.where``, which passes them no gradient) and the rows that may not attend it weigh it
by exactly 0. So the rule costs one read and one write of each guarded tensor forward, and
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


def _sanitize_math(x: torch.Tensor, zero_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The arithmetic of ``sanitize``: plain tensor operations (fused by ``torch.compile`` on CUDA)."""
    ok = torch.isfinite(x)
    bad = ~ok.all(-1)  # (..., n): exact, no overflowing sum
    if zero_rows is not None:
        ok = ok & ~zero_rows.unsqueeze(-1)
    return torch.where(ok, x, torch.zeros((), dtype=x.dtype, device=x.device)), bad


_FUSED: dict[str, Callable[..., Any]] = {}


def _fused(x: torch.Tensor, zero_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``_sanitize_math`` compiled into one kernel (CUDA); the plain operations where compiling fails."""
    fn = _FUSED.get("sanitize")
    if fn is None:
        fn = _FUSED["sanitize"] = torch.compile(_sanitize_math, dynamic=True, fullgraph=True)
    try:
        return fn(x, zero_rows)
    except Exception:  # no Triton, or a compiler that cannot lower it: the same numbers, unfused
        _FUSED["sanitize"] = _sanitize_math
        return _sanitize_math(x, zero_rows)


@torch.library.custom_op("attnlab::sanitize", mutates_args=())
def _sanitize_op(x: torch.Tensor, zero_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return _sanitize_math(x, zero_rows)


@_sanitize_op.register_kernel("cuda")
def _sanitize_cuda(x: torch.Tensor, zero_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return _fused(x, zero_rows)


@_sanitize_op.register_fake
def _sanitize_fake(x: torch.Tensor, zero_rows: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.bool)


def _sanitize_backward(ctx: Any, grad: torch.Tensor, _grad_flags: torch.Tensor | None) -> tuple[torch.Tensor, None]:
    return grad, None  # the identity (see the module docstring)


_sanitize_op.register_autograd(_sanitize_backward)


def sanitize(x: torch.Tensor, zero_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., n, d) → (x with NaN/±inf entries zeroed, (..., n) bool: the rows that held one).

    ``zero_rows`` (broadcastable to (..., n), bool): rows to zero whole as well, in the same pass
    (the query rows that may attend nothing). Under ``torch.compile`` (one node) and on every
    device it is the single operator ``attnlab::sanitize``."""
    if zero_rows is not None:
        zero_rows = zero_rows.expand(x.shape[:-1])
    if x.numel() == 0 or _checks.tracing():  # (inside torch.compile the lines fuse with their neighbours)
        return _sanitize_math(x, zero_rows)
    return _sanitize_op(x, zero_rows)


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


def finish_nonfinite(out: torch.Tensor, hit: torch.Tensor | None, dead: torch.Tensor | None) -> torch.Tensor:
    """One pass over the output: NaN in the rows that attended (or are) a non-finite input,
    zeros in the fully masked rows (which win: a row that may attend nothing is zero)."""
    if hit is None and dead is None:
        return out
    nan = torch.full((), float("nan"), dtype=out.dtype, device=out.device)
    zero = torch.zeros((), dtype=out.dtype, device=out.device)
    if hit is None:
        assert dead is not None  # (the both-None case returned above)
        return torch.where(dead, zero, out)
    hit = hit.unsqueeze(-1)  # (..., q|1, 1)
    if dead is None:
        return torch.where(hit, nan, out)
    return torch.where(hit | dead, torch.where(dead, zero, nan), out)


def host_checks(t: torch.Tensor) -> bool:
    """True where reading a value into Python synchronises no device: CPU tensors, run eagerly.

    There ``attention`` looks before it guards: when every input is finite (one summation pass)
    the guard's copies are skipped, and with no fully masked row the mask is used as given.
    On other devices and under ``torch.compile`` the branch-free path runs (no host reads)."""
    return t.device.type == "cpu" and not _checks.tracing()


__all__ = ["sanitize", "nonfinite_rows", "zero_nonfinite_entries", "zero_nonfinite", "finish_nonfinite", "host_checks"]
