"""The project's size rule, over every function in src/attnlab: a body of at most 60 lines (from its first
statement after the docstring to its last line) and at most 12 parameters (``self``/``cls`` not counted,
``*args``/``**kwargs`` counted; constructors, ``__init__``, are exempt from the parameter limit)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"
MAX_BODY_LINES = 60
MAX_PARAMETERS = 12


def body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's last line (0: a docstring only)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    assert fn.end_lineno is not None
    return fn.end_lineno - body[0].lineno + 1


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return len([n for n in names if n not in ("self", "cls")])


def offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            where = f"{path.relative_to(root.parents[1])}:{node.lineno} {node.name}"
            if (n := body_lines(node)) > MAX_BODY_LINES:
                found.append(f"{where}: body of {n} lines (at most {MAX_BODY_LINES})")
            if node.name != "__init__" and (n := parameters(node)) > MAX_PARAMETERS:
                found.append(f"{where}: {n} parameters (at most {MAX_PARAMETERS})")
    return found


def test_the_rule_measures_bodies_after_the_docstring_and_parameters_without_self():
    src = ('class C:\n    def f(self, a, b, *c, d, **e):\n        """doc\n\n        more."""\n        x = 1\n\n'
           '        return x\n\n    def __init__(self, ' + ", ".join(f"p{i}" for i in range(20)) + "):\n        pass\n")
    f, init = (n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef))
    assert (body_lines(f), parameters(f)) == (3, 5)
    assert (body_lines(init), parameters(init)) == (1, 20)


def test_every_function_in_attnlab_keeps_to_the_size_rule():
    found = offenders(SRC)
    assert not found, "functions over the size rule:\n" + "\n".join(found)
