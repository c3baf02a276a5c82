"""The import graph follows the layers: every arrow points down, and there is no cycle.

Layers (docs/architecture.md), bottom to top:

    _checks, _files, _limits, trace → masks, patterns → mask → functional → kernels → nn, distributed → models
    → explain, interpret, viz (read traces and weights), testing (the contract checker) → data, train, pretrained (the shipped models)
    → experiments → integrations (attnlab as other libraries' attention) → cli

The package's own ``__init__`` (the public names) sits in nn's layer.

Every module of ``attnlab`` is parsed with ``ast``; every import counts, at any
depth (inside functions and ``if TYPE_CHECKING`` blocks too). ``from a import b``
is an arrow to the module ``a.b`` when that is a module, else to ``a``. A module loaded
by name (``importlib.import_module(f"{__name__}.{verb}")``, as the command line loads its
verbs) is an arrow to every public module whose name starts with the literal part of the
name (``{__name__}`` and ``{__package__}`` read as the importing module's; the private
``_helpers`` beside the verbs are imported, not loaded by name), so a verb that imports its
loader back is a cycle here too. An arrow may stay in its layer or point down; one that points up fails, and so
does any cycle between modules (a strongly connected component of more than
one module), each named in the message.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "attnlab"

LAYERS = [
    ("_checks", "_files", "_limits", "trace"),
    ("masks", "patterns"),
    ("mask",),
    ("functional",),
    ("kernels",),
    ("nn", "distributed"),
    ("models",),
    ("explain", "interpret", "viz", "testing"),
    ("data", "train", "pretrained"),
    ("experiments",),
    ("integrations",),
    ("cli", "__main__"),
]
RANK = {part: i for i, parts in enumerate(LAYERS) for part in parts}
# The package itself (attnlab/__init__.py) re-exports functional, masks, patterns, trace and the
# nn registry: it sits in nn's layer, so models and everything above may import it.
ROOT_LAYER = RANK["nn"]


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _loaded_by_name(module: str, call: ast.Call) -> list[str]:
    """The modules ``importlib.import_module(NAME)`` in ``module`` may load: the public ones whose
    name starts with NAME's literal part, ``{__name__}`` and ``{__package__}`` filled in."""
    func = call.func
    if not (isinstance(func, ast.Attribute | ast.Name) and getattr(func, "attr", getattr(func, "id", "")) == "import_module"):
        return []
    if not call.args:
        return []
    arg = call.args[0]
    parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
    package = module if _is_package(module) else module.rpartition(".")[0]
    prefix = ""
    for part in parts:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            prefix += part.value
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in (
                "__name__", "__package__"):
            prefix += module if part.value.id == "__name__" else package
        else:
            break
    if not prefix.startswith("attnlab"):
        return []
    return [m for m in MODULES if m.startswith(prefix) and m != module and not m.rpartition(".")[2].startswith("_")]


def imports(module: str) -> set[str]:
    """The attnlab modules that ``module`` imports, at any depth of its code (also by name: ``import_module``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Call):
            out.update(_loaded_by_name(module, node))
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(module, node)
            targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in MODULES else src for a in node.names]
        for t in targets:
            while t and t not in MODULES:  # import attnlab.nn.registry as r → the module itself
                t = t.rpartition(".")[0]
            if t and t != module:
                out.add(t)
    return out


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT_LAYER
    if parts[1] not in RANK:
        raise AssertionError(f"{module}: its package {parts[1]!r} has no layer in tests/test_imports_point_down_the_layers.py LAYERS")
    return RANK[parts[1]]


GRAPH = {m: imports(m) for m in MODULES}

# Known violations, each to be fixed (none are left; an entry here exempts one edge or cycle).
KNOWN_UP: set[tuple[str, str]] = set()
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def test_every_module_has_a_layer():
    for m in MODULES:
        layer(m)


def test_no_arrow_points_up_the_layers():
    up = sorted(
        f"{a} (layer {'/'.join(LAYERS[layer(a)])}) imports {b} (layer {'/'.join(LAYERS[layer(b)])})"
        for a, targets in GRAPH.items() for b in targets if layer(b) > layer(a) and (a, b) not in KNOWN_UP
    )
    assert not up, "upward imports:\n  " + "\n  ".join(up)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    cycles = [c for c in _cycles(GRAPH) if tuple(c) not in KNOWN_CYCLES]
    assert not cycles, "import cycles:\n  " + "\n  ".join(" ↔ ".join(c) for c in cycles)


def test_the_checker_sees_imports_inside_functions_and_finds_cycles():
    tree = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(tree) == [["a", "b", "c"]]
    lazy = [m for m in MODULES if m.endswith("nn.registry")]
    if lazy:  # resolution of relative imports, also below a def
        assert "attnlab.nn.registry" in MODULES
    with pytest.raises(AssertionError):
        layer("attnlab.nowhere.x")


def test_a_module_loaded_by_name_is_an_arrow_and_a_loader_imported_back_is_a_cycle():
    verbs = {f"attnlab.cli.{v}" for v in ("explain", "view", "plot_run", "train", "experiment")}
    assert verbs <= GRAPH["attnlab.cli"]  # the loader's f"{__name__}.{verb}" reaches every verb
    assert {"attnlab.cli.train_lm", "attnlab.cli.train_seq2seq"} <= GRAPH["attnlab.cli.train"]
    assert "attnlab.cli.experiment_vision" not in GRAPH["attnlab.cli.train"]  # only its own tasks
    # a verb that took its help from the loader (``from . import VERBS``) would close a cycle
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph["attnlab.cli.explain"].add("attnlab.cli")
    assert _cycles(graph) == [["attnlab.cli", "attnlab.cli.explain"]]


def _package(module: str) -> str:
    """attnlab.nn.latent → attnlab.nn; attnlab.masks → attnlab (a module at the root)."""
    return module if _is_package(module) else module.rpartition(".")[0]


def private_imports(module: str, text: str | None = None) -> list[str]:
    """``from X import _name`` where X lies in another package than ``module`` (private names stay home).
    Private *modules* (``from .. import _checks``, the input checks below every layer) and dunders
    (``__version__``) are not private names."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8") if text is None else text)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(module, node)
            if src not in MODULES or _package(src) == _package(module):
                continue
            found += [f"{module} imports {a.name} from {src}" for a in node.names
                      if a.name.startswith("_") and not a.name.endswith("__") and f"{src}.{a.name}" not in MODULES]
    return found


def test_no_module_imports_a_private_name_from_another_package():
    bad = [line for m in MODULES for line in private_imports(m)]
    assert not bad, "private names imported across packages:\n  " + "\n  ".join(bad)


def test_the_private_import_check_sees_one():
    text = "from ..functional.attention import _guard, attention\nfrom .. import _checks\nfrom .multihead import _x\n"
    assert private_imports("attnlab.nn.latent", text) == [
        "attnlab.nn.latent imports _guard from attnlab.functional.attention"]
