"""Worked examples: a TOML file with a mechanism, its inputs, parameters and claims.

    mechanism = "additive"
    [inputs]   query = [...]; keys = [[...], ...]; values = (default: the keys)
    [params]   w_q, w_k, v, weight, scale  (matrices as written: W acting on a column, W x)
    [[claim]]  step = "scores"; index = [2]; value = 1.32     (index is 1-based)

``run(example)`` computes the example with the library inside ``attnlab.trace()``
in float64 and returns the trace; nothing here does arithmetic of its own.
Numbers are parsed as ``Decimal`` so a claim keeps its written precision
(``0.10`` has two decimals).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from ..attention import attention
from ..scores import additive, concat, general
from ..trace import Trace, trace

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ExampleError(ValueError):
    """A malformed worked-example file; the message names the field."""


@dataclass
class Example:
    name: str
    mechanism: str
    inputs: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    claims: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    source: str = ""
    tokens: list[str] | None = None


def _tensor(where: str, value: Any) -> torch.Tensor:
    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        if isinstance(x, (int, float, Decimal)) and not isinstance(x, bool):
            return float(x)
        raise ExampleError(f"{where}: expected numbers or nested lists of numbers; got {x!r}")

    try:
        return torch.tensor(conv(value), dtype=torch.float64)
    except ValueError as e:  # ragged lists
        raise ExampleError(f"{where}: rows must all have the same length ({e})") from None


def parse(text: str, name: str = "<string>") -> Example:
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as e:
        raise ExampleError(f"{name}: not valid TOML: {e}") from None
    if "mechanism" not in data:
        raise ExampleError(f"{name}: missing the field 'mechanism' (one of {', '.join(sorted(MECHANISMS))})")
    mech = data["mechanism"]
    if mech not in MECHANISMS:
        raise ExampleError(f"{name}: unknown mechanism {mech!r}; known: {', '.join(sorted(MECHANISMS))}")
    if "inputs" not in data or not isinstance(data["inputs"], dict):
        raise ExampleError(f"{name}: missing the table [inputs]")
    claims = data.get("claim", [])
    if not isinstance(claims, list):
        raise ExampleError(f"{name}: 'claim' must be an array of tables ([[claim]])")
    return Example(
        name=name,
        mechanism=mech,
        inputs=data["inputs"],
        params=data.get("params", {}),
        claims=claims,
        title=str(data.get("title", "")),
        source=str(data.get("source", "")),
        tokens=data.get("tokens"),
    )


def builtin_names() -> list[str]:
    folder = resources.files("attnlab.explain") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str | Path) -> Example:
    """A built-in example by name (``seed-000-additive``) or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ExampleError(f"no such file: {path}")
        return parse(path.read_text(encoding="utf-8"), str(path))
    name = str(name_or_path)
    if name not in builtin_names():
        raise ExampleError(f"no built-in example {name!r}; available: {', '.join(builtin_names())}")
    text = (resources.files("attnlab.explain") / "examples" / f"{name}.toml").read_text(encoding="utf-8")
    return parse(text, name)


# --- running an example -------------------------------------------------------


def _need(ex: Example, table: str, key: str) -> torch.Tensor:
    src = ex.inputs if table == "inputs" else ex.params
    if key not in src:
        raise ExampleError(f"{ex.name}: mechanism {ex.mechanism!r} needs [{table}] {key}")
    return _tensor(f"{ex.name}: [{table}] {key}", src[key])


def _qkv(ex: Example) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = _need(ex, "inputs", "query")
    k = _need(ex, "inputs", "keys")
    v = _need(ex, "inputs", "values") if "values" in ex.inputs else k
    if q.dim() == 1:
        q = q.unsqueeze(0)
    if k.dim() != 2 or v.dim() != 2:
        raise ExampleError(f"{ex.name}: [inputs] keys and values must be matrices (one row per key)")
    return q, k, v


def _run_scored(score_fn: Callable, ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    with trace() as t:
        attention(q, k, v, score=score_fn, need_weights=True)
    return t


def _scale(ex: Example) -> float | None:
    return float(ex.params["scale"]) if "scale" in ex.params else None


def _run_attention_scaled(ex: Example) -> Trace:
    q, k, v = _qkv(ex)
    with trace() as t:
        attention(q, k, v, score="scaled_dot", scale=_scale(ex), need_weights=True)
    return t


def _run_sparse(ex: Example) -> Trace:
    """Scaled dot-product self-attention masked by a pattern: [params] pattern = [{kind, args}], combine."""
    from ..patterns import from_spec

    q, k, v = _qkv(ex)
    if "pattern" not in ex.params:
        raise ExampleError(f"{ex.name}: mechanism 'sparse' needs [params] pattern = [{{kind = ..., args = [...]}}]")
    mask = from_spec(ex.params["pattern"], str(ex.params.get("combine", "or"))).materialize(k.shape[0])
    with trace() as t:
        attention(q, k, v, score="scaled_dot", scale=_scale(ex), mask=mask[-q.shape[0] :], need_weights=True)
    return t


MECHANISMS: dict[str, Callable[[Example], Trace]] = {
    "sparse": _run_sparse,
    "dot": lambda ex: _run_scored("dot", ex),
    "scaled_dot": _run_attention_scaled,
    "general": lambda ex: _run_scored(partial(general, weight=_need(ex, "params", "weight")), ex),
    "additive": lambda ex: _run_scored(
        partial(additive, w_q=_need(ex, "params", "w_q"), w_k=_need(ex, "params", "w_k"), v=_need(ex, "params", "v")),
        ex,
    ),
    "concat": lambda ex: _run_scored(
        partial(concat, weight=_need(ex, "params", "weight"), v=_need(ex, "params", "v")), ex
    ),
}


def run(ex: Example) -> Trace:
    """Compute the example with the library and return its trace."""
    try:
        return MECHANISMS[ex.mechanism](ex)
    except ExampleError:
        raise
    except ValueError as e:  # the library's own shape errors, with the file's name in front
        raise ExampleError(f"{ex.name}: {e}") from None


# Steps with no query dimension (they depend on the keys only).
KEY_STEPS = {"projected_keys"}


def single_query(ex: Example) -> bool:
    q = ex.inputs.get("query")
    return isinstance(q, list) and bool(q) and not isinstance(q[0], list)


def display_value(ex: Example, name: str, value: torch.Tensor) -> torch.Tensor:
    """A step's value as the example writes it: one query vector drops the query axis."""
    if single_query(ex) and name not in KEY_STEPS and value.dim() >= 1 and value.shape[0] == 1:
        return value[0]
    return value


__all__ = ["Example", "ExampleError", "parse", "load", "run", "builtin_names", "MECHANISMS", "display_value"]
