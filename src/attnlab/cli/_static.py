"""What the parsers show from the library (choices, a config's defaults), read from its source files.

Most modules of attnlab import torch, which takes seconds to load; ``attnlab VERB --help`` and a
mistyped flag should answer at once. So a parser does not import ``attnlab.train.runtime`` for its
``DEVICES``: it reads the literal ``DEVICES = ("auto", "cpu", "cuda", "mps")`` from that file with
``ast``, and the module stays the one definition. What can be read:

- ``constant("train.runtime", "DEVICES")``: a literal value at the top of a module; a dict whose
  values are code (classes, functions) gives its keys, in order; a collection built from calls
  (``{s.name: s for s in (Signature("qkv_mask", ...), ...)}``) gives each call's first string;
- ``defaults("train.loop", "TrainConfig")``: a dataclass's fields and their literal defaults, for
  ``field_option`` (``attnlab.cli._fields``).

Each read is recorded in ``READ``; tests/cli/test_help_and_usage_errors_without_torch.py imports
the real modules and checks every value read here against them.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import MISSING
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # src/attnlab

# (kind, module, name) of every value read, for the test that compares them with the imported ones
READ: set[tuple[str, str, str]] = set()


@functools.cache
def _top(module: str) -> dict[str, ast.expr | ast.ClassDef]:
    """The top-level assignments (name → value) and classes of ``attnlab.<module>``."""
    path = PACKAGE.joinpath(*module.split(".")).with_suffix(".py")
    out: dict[str, ast.expr | ast.ClassDef] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
        elif isinstance(node, ast.ClassDef):
            out[node.name] = node
    return out


def _value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) for k in node.keys):
        return tuple(k.value for k in node.keys)  # type: ignore[union-attr]
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    firsts = [c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)]
    if calls and len(firsts) == len(calls) and all(isinstance(f, str) for f in firsts):
        return tuple(firsts)
    raise ValueError(f"not a literal, a dict of literal keys or a collection of named calls: {ast.unparse(node)}")


def constant(module: str, name: str) -> Any:
    """``NAME``'s value in ``attnlab.<module>`` without importing it (see the module's docstring)."""
    node = _top(module).get(name)
    if not isinstance(node, ast.expr):
        raise LookupError(f"attnlab.{module} has no top-level {name} = ...")
    READ.add(("constant", module, name))
    return _value(node)


class Defaults:
    """A dataclass's fields (in order) and literal defaults, read from its source: what
    ``field_option`` needs of a config class to add its options."""

    def __init__(self, module: str, name: str, fields: dict[str, Any]):
        self.__name__, self.module, self.fields = name, module, fields

    def default(self, name: str) -> Any:
        if name not in self.fields:
            raise KeyError(f"{self.__name__} has no field {name!r}")
        if self.fields[name] is MISSING:
            raise KeyError(f"{self.__name__}.{name} has no default")
        return self.fields[name]


def defaults(module: str, cls: str) -> Defaults:
    """The fields of the dataclass ``cls`` of ``attnlab.<module>``; a field whose default is not a
    literal (``field(default_factory=...)``) or that has none reads as ``MISSING``."""
    node = _top(module).get(cls)
    if not isinstance(node, ast.ClassDef):
        raise LookupError(f"attnlab.{module} has no class {cls}")
    fields: dict[str, Any] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if "ClassVar" in ast.unparse(stmt.annotation):
                continue
            try:
                fields[stmt.target.id] = MISSING if stmt.value is None else ast.literal_eval(stmt.value)
            except ValueError:
                fields[stmt.target.id] = MISSING
    READ.add(("defaults", module, cls))
    return Defaults(module, cls, fields)


__all__ = ["constant", "defaults", "Defaults", "READ"]
