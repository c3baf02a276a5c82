"""Worked examples: a TOML file with a mechanism, its inputs, parameters and claims.

    mechanism = "additive"
    [inputs]   query = [...]; keys = [[...], ...]; values = (default: the keys)
               x = [[...], ...]  (self_attention, multi_head: Q, K, V = x projected)
               feature_map = [[[...]]]  (channel, spatial: (C, H, W) or (b, C, H, W))
               mask = [[1, 0, ...], ...]  (optional; 1/true = may attend)
    [params]   w_q, w_k, v, weight, w_v, w_o, num_heads, scale, causal, score, w_c, b_c, ...
               (matrices as the tutorials write them: W acting on a column, W x)
    [[claim]]  step = "scores"; index = [2]; value = 1.32     (index is 1-based)

This module reads examples: ``parse``/``load`` give an ``Example`` and the
accessors below turn its tables into float64 tensors. Running one is
``attnlab.explain.mechanisms.run`` (the registry of mechanisms). Numbers are
parsed as ``Decimal`` so a claim keeps its written precision (``0.10`` has two
decimals).
"""


from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from .names import NAMES, canonical

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ExampleError(ValueError):
    """A malformed worked-example file; the message names the field (and its line)."""


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
    key_tokens: list[str] | None = None
    text: str = ""
    title_zh: str = ""

    def line(self, table: str, key: str | None = None, nth: int | None = None) -> int | None:
        """The 1-based line of ``[table] key`` (or of the nth ``[[claim]]``) in the file, if found."""
        return _locate(self.text, table, key, nth)

    def at(self, table: str, key: str | None = None, nth: int | None = None) -> str:
        """``name, line N: [table] key`` for messages."""
        n = self.line(table, key, nth)
        where = f"{self.name}, line {n}" if n else self.name
        what = f"[[claim]] #{nth + 1}" if nth is not None else f"[{table}]" + (f" {key}" if key else "")
        return f"{where}: {what}"


def _locate(text: str, table: str, key: str | None, nth: int | None) -> int | None:
    current, seen = "", -1
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[[") and line.endswith("]]"):
            current = line[2:-2].strip()
            if current == table and nth is not None:
                seen += 1
                if seen == nth and key is None:
                    return n
            continue
        if line.startswith("[") and "]" in line:
            current = line[1 : line.index("]")].strip()
            if current == table and key is None and nth is None:
                return n
            continue
        if key is not None and current == ("" if table == "" else table) and re.match(rf"{re.escape(key)}\s*=", line):
            if nth is None or seen == nth:
                return n
    return None


def _tensor(where: str, value: Any) -> torch.Tensor:
    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        if isinstance(x, (int, float, Decimal)) and not isinstance(x, bool):
            return float(x)
        raise ExampleError(f"{where}: expected numbers or nested lists of numbers; got {x!r}")

    numbers = conv(value)  # a non-number is named as such, not as a ragged row
    try:
        return torch.tensor(numbers, dtype=torch.float64)
    except ValueError as e:  # ragged lists
        raise ExampleError(f"{where}: rows must all have the same length ({e})") from None


def parse(text: str, name: str = "<string>") -> Example:
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as e:
        msg = str(e).replace("(at end of document)", f"(at the end of the file, line {len(text.splitlines())})")
        raise ExampleError(f"{name}: not valid TOML: {msg}") from None
    if "mechanism" not in data:
        raise ExampleError(f"{name}: missing the field 'mechanism' (one of {', '.join(sorted(NAMES))})")
    mech = canonical(data["mechanism"]) if isinstance(data["mechanism"], str) else data["mechanism"]
    if mech not in NAMES:
        n = _locate(text, "", "mechanism", None)
        where = f"{name}, line {n}" if n else name
        raise ExampleError(f"{where}: unknown mechanism {data['mechanism']!r}; known: {', '.join(sorted(NAMES))}")
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
        key_tokens=data.get("key_tokens"),
        text=text,
        title_zh=str(data.get("title_zh", "")),
    )


# The names the built-in examples had in 0.1, kept for 0.2 only (they go in 0.3).
OLD_NAMES = {
    "seed-000-additive": "tutorial1-additive",
    "seed-001-bahdanau": "tutorial2-bahdanau",
    "seed-001-luong-dot": "tutorial2-luong-dot",
    "seed-001-multi-head": "tutorial2-multi-head",
    "seed-001-scaled-dot": "tutorial2-scaled-dot",
    "seed-001-self-attention": "tutorial2-self-attention",
}


def builtin_names() -> list[str]:
    folder = resources.files("attnlab.explain") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load(name_or_path: str | Path) -> Example:
    """A built-in example by name (``tutorial1-additive``) or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ExampleError(f"no such file: {path}")
        return parse(path.read_text(encoding="utf-8"), str(path))
    name = OLD_NAMES.get(str(name_or_path), str(name_or_path))
    if name not in builtin_names():
        raise ExampleError(f"no built-in example {name!r}; available: {', '.join(builtin_names())}")
    text = (resources.files("attnlab.explain") / "examples" / f"{name}.toml").read_text(encoding="utf-8")
    return parse(text, name)


__all__ = ["Example", "ExampleError", "parse", "load", "builtin_names"]
