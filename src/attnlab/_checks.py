"""Input checks shared by every mechanism: clear ``ValueError`` messages.

Each message names what was given and what was expected, so a call can be
fixed from the message alone. Checks that need to look at tensor *values*
(NaN in a bias) are skipped while ``torch.compile`` or an exporter traces the
code, where data-dependent Python branches are not allowed.
"""

from __future__ import annotations

import math
import numbers

import torch


def shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def tracing() -> bool:
    """True inside torch.compile, torch.jit tracing or ONNX export."""
    # (ONNX export traces too: the TorchScript exporter under torch.jit's tracer, the dynamo one compiling)
    return _is_compiling() or torch._C._is_tracing() or torch.jit.is_scripting()


_is_compiling = torch.compiler.is_compiling


class DtypeError(TypeError, ValueError):
    """A tensor of the wrong dtype (caught as either TypeError or ValueError)."""


def tensor(name: str, t: object, min_dim: int = 1) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dim() < min_dim:
        raise ValueError(f"{name} must have at least {min_dim} dimensions; got shape {shape(t)}")
    return t


def autocasting(t: torch.Tensor) -> bool:
    """True inside ``torch.autocast`` for ``t``'s device: there the matmuls cast their inputs
    themselves, so tensors of different floating dtypes are expected, not an error."""
    try:
        return torch.is_autocast_enabled(t.device.type)
    except (RuntimeError, TypeError):  # a device type autocast does not know
        return False


def floating(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> torch.dtype:
    """All tensors floating point and of one dtype (mixed dtypes allowed under autocast); returns the first's dtype."""
    for n, t in zip(names, tensors):
        if not t.is_floating_point():
            raise DtypeError(
                f"{n} must be a floating-point tensor (float16, bfloat16, float32 or float64); got dtype {t.dtype}"
            )
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1 and not autocasting(tensors[0]):
        given = ", ".join(f"{n} {t.dtype}" for n, t in zip(names, tensors))
        raise DtypeError(f"{', '.join(names)} must share one dtype; got {given} (convert with .to(dtype))")
    return tensors[0].dtype


def features(name: str, t: torch.Tensor) -> None:
    """The feature size (last dimension) must be at least 1."""
    if t.shape[-1] < 1:
        raise ValueError(f"{name} must have at least one feature (d >= 1); got shape {shape(t)}")


def scale(s: object) -> float:
    """A score scale must be a finite positive number."""
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise ValueError(f"scale must be a finite positive number (or None for 1/sqrt(d)); got {s!r}")
    s = float(s)
    if not (math.isfinite(s) and s > 0.0):
        raise ValueError(f"scale must be a finite positive number (or None for 1/sqrt(d)); got {s!r}")
    return s


def integer(name: str, value: object, minimum: int = 1) -> int:
    """An integer (not a bool, not a float such as 2.0) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def number(name: str, value: object, above: float, *, inclusive: bool = False, meaning: str = "") -> float:
    """A finite real number greater than ``above`` (or equal to it when ``inclusive``)."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if ok:
        ok = value >= above if inclusive else value > above
    if not ok:
        bound = f"{'>=' if inclusive else '>'} {above:g}"
        raise ValueError(f"{name} must be a finite number {bound}{f' ({meaning})' if meaning else ''}; got {value!r}")
    return float(value)  # type: ignore[arg-type]


def optional_integer(name: str, value: object, minimum: int = 1) -> int | None:
    """None, or an integer of at least ``minimum`` (``integer``'s check and message)."""
    return None if value is None else integer(name, value, minimum)


def even(name: str, value: object, minimum: int = 2) -> int:
    """An even integer (not a bool, not a float) of at least ``minimum``: a size split into pairs."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum or value % 2:
        raise ValueError(f"{name} must be an even integer >= {minimum}; got {value!r}")
    return int(value)


def probability(name: str, value: object, *, one: bool = False) -> float:
    """A dropout probability: a finite number in [0, 1), or [0, 1] with ``one`` (``torch.nn.Dropout``
    takes 1, which drops everything; attention's ``dropout_p`` does not)."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if not (ok and 0.0 <= value and (value <= 1.0 if one else value < 1.0)):  # type: ignore[operator]
        raise ValueError(f"{name} must be a probability in [0, 1{']' if one else ')'}; got {value!r}")
    return float(value)  # type: ignore[arg-type]


def module_input(module: torch.nn.Module, names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> None:
    """A module's inputs are floating and of its parameters' dtype: float64 into a float32 module is
    refused, never cast silently (under ``torch.autocast`` mixed dtypes are expected and pass).

    The message names both dtypes and the two ways to make them agree.
    """
    floating(names, tensors)
    p = next(module.parameters(), None)
    if p is None or not p.is_floating_point() or autocasting(tensors[0]):
        return
    for n, t in zip(names, tensors):
        if t.dtype != p.dtype:
            raise DtypeError(
                f"{n} has dtype {t.dtype}, but {type(module).__name__}'s parameters are {p.dtype}; "
                f"convert the input ({n}.to({p.dtype})) or the module (module.to({t.dtype}))"
            )



def sequence_input(module: torch.nn.Module, x: torch.Tensor, dim: int) -> None:
    """A self-attention module's input x is (b, n, dim), floating and of the module's dtype (``module_input``)."""
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"x must be (b, n, dim) with dim={dim}; got shape {tuple(x.shape)}")
    module_input(module, ("x",), (x,))

def _values_readable(t: torch.Tensor) -> bool:
    return not tracing() and t.device.type != "meta"


def all_finite(*tensors: torch.Tensor) -> bool:
    """True when no element is NaN or ±inf.

    A sum is one cheap pass and is finite whenever every element is; only when it is
    not (a NaN or inf, or a finite sum that overflowed) does the exact per-element check run.
    """
    total = 0.0
    for t in tensors:  # one sum each, read as Python floats (a NaN or inf makes the total non-finite)
        total += float((t.detach() if t.requires_grad else t).sum())
    if math.isfinite(total):
        return True
    with torch.no_grad():
        return all(bool(torch.isfinite(t).all()) for t in tensors)


def features_match(what: str, q: torch.Tensor, k: torch.Tensor) -> None:
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"{what} needs query and key feature sizes to match: query {shape(q)} has d={q.shape[-1]}, "
            f"key {shape(k)} has d={k.shape[-1]} (use the 'general', 'additive' or 'concat' score "
            "for different sizes)"
        )


def param(name: str, t: object, expected: tuple[int, ...], meaning: str) -> torch.Tensor:
    """A parameter must have exactly the expected shape (torch.nn.Linear layout)."""
    t = tensor(name, t, min_dim=1)
    if tuple(t.shape) != tuple(expected):
        exp = "(" + ", ".join(str(e) for e in expected) + ")"
        raise ValueError(f"{name} must have shape {exp} ({meaning}); got {shape(t)}")
    return t


def broadcast_shapes(*shapes) -> torch.Size:
    """``torch.broadcast_shapes`` in plain Python, with the same result and the same
    ``RuntimeError`` when the shapes do not broadcast. Torch's imports its symbolic-shape
    machinery (about a second) the first time it runs, which every short command would pay;
    while compiling, torch's own runs (it knows symbolic sizes)."""
    if torch.compiler.is_compiling():
        return torch.broadcast_shapes(*shapes)
    n = max((len(s) for s in shapes), default=0)
    out = [1] * n
    for s in shapes:
        for i, d in enumerate(s, start=n - len(s)):
            d = int(d)
            if d < 0:
                raise RuntimeError(f"shapes cannot have negative sizes; got {tuple(s)}")
            if d != 1:
                if out[i] not in (1, d):
                    raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} do not broadcast: "
                                       f"{out[i]} against {d} at dimension {i}")
                out[i] = d
    return torch.Size(out)


def leading_broadcast(names: tuple[str, ...], tensors: tuple[torch.Tensor, ...]) -> torch.Size:
    """The broadcast of the batch dimensions (all but the last two)."""
    leads = [t.shape[:-2] for t in tensors]
    if all(lead == leads[0] for lead in leads[1:]):
        return leads[0]  # the common case, without a broadcast's Python overhead
    try:
        return broadcast_shapes(*(t.shape[:-2] for t in tensors))
    except RuntimeError:
        given = ", ".join(f"{n} {shape(t)}" for n, t in zip(names, tensors))
        raise ValueError(
            f"batch dimensions (all but the last two) do not broadcast: {given}"
        ) from None


def mask(m: object, scores_shape: torch.Size | tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
    """A mask must be bool or floating and broadcast to the scores' shape (..., q, k).

    ``dtype``: the scores' dtype; a float mask (an additive bias) must have it.
    A float mask must not contain NaN or +inf (checked only when values can be read:
    not while compiling, not on the meta device).
    """
    if not isinstance(m, torch.Tensor):
        raise ValueError(f"mask must be a torch.Tensor (bool or float); got {type(m).__name__}")
    if m.dtype != torch.bool and not m.is_floating_point():
        raise ValueError(
            f"mask must be bool (True = may attend) or floating (an additive bias); got dtype {m.dtype}. "
            "Convert an integer mask with mask.bool() after checking its polarity"
        )
    target = tuple(scores_shape)
    try:
        ok = tuple(broadcast_shapes(m.shape, target)) == target
    except RuntimeError:
        ok = False
    if not ok:
        hint = ""
        if m.dim() == 2 and len(target) >= 3 and m.shape[0] == target[0] and m.shape[1] == target[-1]:
            hint = " A (b, k) padding mask must be given as (b, 1, 1, k): attnlab.masks.as_key_mask(mask)."
        raise ValueError(
            f"mask of shape {shape(m)} does not broadcast to the scores' shape "
            f"({', '.join(map(str, target))}) = (..., q, k).{hint}"
        )
    if m.is_floating_point() and dtype is not None and m.dtype != dtype:
        raise DtypeError(
            f"a float mask (additive bias) must have the scores' dtype {dtype}; got mask dtype {m.dtype} "
            f"(convert with mask.to({dtype}), or pass a bool mask)"
        )
    if m.is_floating_point() and _values_readable(m):
        if bool(torch.isnan(m).any()):
            raise ValueError(
                "float mask (additive bias) must hold finite biases or -inf (masked out); got NaN. "
                "Use -inf for positions that may not be attended"
            )
        if bool(torch.isposinf(m).any()):
            raise ValueError("float mask (additive bias) must hold finite biases or -inf (masked out); got +inf")
    return m


__all__: list[str] = []
