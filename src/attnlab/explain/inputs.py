"""Reading a worked example's inputs and parameters: the named tensors each mechanism takes.

Each reader raises ``ExampleError`` naming the table and key at fault (``[inputs] keys``) and
what was expected (a matrix, a positive integer, a mask of the queries × keys shape).
"""

from __future__ import annotations

import torch

from .. import masks, patterns
from ..functional.target import NORMALISE
from .examples import Example, ExampleError, _tensor


def need(ex: Example, table: str, key: str) -> torch.Tensor:
    src = ex.inputs if table == "inputs" else ex.params
    if key not in src:
        raise ExampleError(f"{ex.at(table)}: mechanism {ex.mechanism!r} needs {key}")
    return _tensor(ex.at(table, key), src[key])


def optional(ex: Example, table: str, key: str) -> torch.Tensor | None:
    src = ex.inputs if table == "inputs" else ex.params
    return need(ex, table, key) if key in src else None


def positive_int(ex: Example, key: str, default: int | None = None) -> int:
    if key not in ex.params:
        if default is None:
            raise ExampleError(f"{ex.at('params')}: mechanism {ex.mechanism!r} needs {key}")
        return default
    v = ex.params[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ExampleError(f"{ex.at('params', key)} must be a positive integer; got {v!r}")
    return v


def rows(ex: Example, key: str) -> torch.Tensor:
    t = need(ex, "inputs", key)
    if t.dim() != 2:
        raise ExampleError(f"{ex.at('inputs', key)} must be a matrix (one row per position); got shape {tuple(t.shape)}")
    return t


def _batch_of(ex: Example, key: str, dims: int, expected: str) -> torch.Tensor:
    """[inputs] ``key`` with ``dims`` dimensions, or one fewer (one item: a leading axis of 1 is added)."""
    t = need(ex, "inputs", key)
    if t.dim() == dims - 1:
        t = t.unsqueeze(0)
    if t.dim() != dims:
        raise ExampleError(f"{ex.at('inputs', key)} must be {expected}; got shape {tuple(t.shape)}")
    return t


def query(ex: Example) -> torch.Tensor:
    return _batch_of(ex, "query", 2, "a vector or rows of queries")


def qkv(ex: Example) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = query(ex)
    k = rows(ex, "keys")
    v = rows(ex, "values") if "values" in ex.inputs else k
    if v.shape[0] != k.shape[0]:
        raise ExampleError(f"{ex.at('inputs', 'values')}: {v.shape[0]} values for {k.shape[0]} keys")
    return q, k, v


def mask(ex: Example, q_len: int, k_len: int) -> torch.Tensor | None:
    """[inputs] mask (1/true = may attend; a row per query, or one row for all) and/or [params] causal."""
    m = None
    if "mask" in ex.inputs:
        raw = ex.inputs["mask"]

        def conv(x):
            if isinstance(x, list):
                return [conv(y) for y in x]
            if isinstance(x, bool) or x in (0, 1):
                return bool(x)
            raise ExampleError(f"{ex.at('inputs', 'mask')}: entries must be 1/0 or true/false; got {x!r}")

        bits = conv(raw)  # an entry that is not a bit is named as such, not as a ragged row
        try:
            m = torch.tensor(bits, dtype=torch.bool)
        except ValueError as e:
            raise ExampleError(f"{ex.at('inputs', 'mask')}: rows must all have the same length ({e})") from None
        if m.dim() == 1:
            m = m.unsqueeze(0)
        if m.dim() != 2 or m.shape[1] != k_len or m.shape[0] not in (1, q_len):
            raise ExampleError(
                f"{ex.at('inputs', 'mask')} must be ({q_len}, {k_len}) or ({k_len},) (queries × keys); "
                f"got shape {tuple(m.shape)}"
            )
    if ex.params.get("causal", False) is True:
        causal = masks.causal(q_len, k_len)  # bottom-right aligned, as the mechanisms' own causal=True
        m = causal if m is None else (m & causal)
    return m


def scale(ex: Example) -> float | None:
    return float(ex.params["scale"]) if "scale" in ex.params else None


def feature_map(ex: Example) -> torch.Tensor:
    return _batch_of(ex, "feature_map", 4, "(C, H, W) or (b, C, H, W)")


# --- what one mechanism reads -------------------------------------------------------


def num_heads(ex: Example) -> int:
    """[params] num_heads, 1 when absent or not an integer (display and recomputation read it; the run checks it)."""
    h = ex.params.get("num_heads", 1)
    return h if isinstance(h, int) and not isinstance(h, bool) else 1


def neighborhood_mask(ex: Example) -> torch.Tensor:
    """The (n, n) bool mask of ``attnlab.patterns.neighborhood_2d`` over the example's H × W grid."""
    hgt, wid, kernel = positive_int(ex, "height"), positive_int(ex, "width"), positive_int(ex, "kernel")
    n = rows(ex, "keys").shape[0]
    if n != hgt * wid or query(ex).shape[0] != n:
        raise ExampleError(f"{ex.at('inputs')}: a {hgt} × {wid} grid needs {hgt * wid} queries and keys; got {n} keys")
    try:
        return patterns.neighborhood_2d(hgt, wid, kernel, positive_int(ex, "dilation", 1)).materialize(n)
    except (ValueError, TypeError) as e:
        raise ExampleError(f"{ex.at('params')}: {e}") from None


def normalise(ex: Example) -> str:
    """[params] normalise: "softmax" (default) or "none" (DIN's sum pooling)."""
    norm = ex.params.get("normalise", "softmax")
    if norm not in NORMALISE:
        raise ExampleError(f"{ex.at('params', 'normalise')} must be one of {', '.join(NORMALISE)}; got {norm!r}")
    return norm


def target_inputs(ex: Example) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The candidate (d,), the history (n, d) and the padding mask (n,) or None (True = a real item)."""
    c, h = need(ex, "inputs", "candidate"), rows(ex, "history")
    if c.dim() != 1:
        raise ExampleError(f"{ex.at('inputs', 'candidate')} must be a vector (d,); got shape {tuple(c.shape)}")
    m = mask(ex, 1, h.shape[0])
    return c, h, None if m is None else m[0]


__all__ = ["need", "optional", "positive_int", "rows", "query", "qkv", "mask", "scale", "feature_map", "num_heads",
           "neighborhood_mask", "normalise", "target_inputs"]
