"""attnlab has one training loop, ``train.fit.fit``: every model it trains (the translation models,
the character GPT, the captioner, the experiments' classifiers) is a task of that loop.

Every module of ``attnlab`` is parsed with ``ast`` and searched for what a training loop does: a
``backward()`` call, an optimizer's or a schedule's ``step()`` (a call of ``step`` with no
argument), ``zero_grad()``, ``clip_grad_norm_()``, an optimizer made from ``torch.optim`` (or that
module imported). Outside ``attnlab.train`` only the exceptions listed here, each with its reason,
may do so; inside it, the one ``backward()`` is ``Runtime.step``'s; and there is one function named
``fit``. The lists are compared for equality, so an exception that is no longer needed fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "attnlab"

# Outside attnlab.train: (module, what it does) → why it is not a training loop.
EXCEPTIONS = {
    ("experiments/faithfulness.py", "step()"): "the adversarial search: Adam moves a batch's attention weights, "
                                              "not a model's parameters",
    ("experiments/faithfulness.py", "torch.optim"): "the same search's optimizer over the weights",
}
# Inside attnlab.train: where the loop's own backward and optimizer step are.
LOOP = {("train/runtime.py", "backward()")}


def _training_calls(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name, bare = node.func.attr, not node.args and not node.keywords
            if name in ("backward", "zero_grad", "clip_grad_norm_") or (name == "step" and bare):
                found.add(f"{name}()")
        elif isinstance(node, ast.Attribute) and node.attr == "optim" and getattr(node.value, "id", None) == "torch":
            found.add("torch.optim")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.optim"):
            found.add("torch.optim")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and any(a.name == "optim" for a in node.names):
            found.add("torch.optim")
    return found


def _scan() -> dict[tuple[str, str], int]:
    """(module path below attnlab, what) for every training call; ``def fit`` counted as ("…", "def fit")."""
    out: dict[tuple[str, str], int] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for what in _training_calls(tree):
            out[(rel, what)] = out.get((rel, what), 0) + 1
        fits = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "fit"]
        if fits:
            out[(rel, "def fit")] = len(fits)
    return out


FOUND = _scan()


def test_no_module_outside_train_trains_a_model_itself():
    outside = {key for key in FOUND if not key[0].startswith("train/") and key[1] != "def fit"}
    assert outside == set(EXCEPTIONS), (
        f"training calls outside attnlab.train: {sorted(outside - set(EXCEPTIONS))} (make the model a task of "
        f"train.fit.fit, e.g. train.classify.ClassifierTask); exceptions no longer needed: "
        f"{sorted(set(EXCEPTIONS) - outside)}")


def test_the_one_backward_is_the_runtimes_step():
    backward = {key for key in FOUND if key[0].startswith("train/") and key[1] == "backward()"}
    assert backward == LOOP and FOUND[("train/runtime.py", "backward()")] == 1


def test_there_is_one_fit():
    assert {key: n for key, n in FOUND.items() if key[1] == "def fit"} == {("train/fit.py", "def fit"): 1}


def test_the_search_finds_what_a_hand_written_loop_does():
    """The scan itself can fail: a loop written the usual way is seen in each of its parts."""
    loop = ast.parse(
        "import torch\nfrom torch.optim import SGD\n"
        "opt = torch.optim.Adam(model.parameters())\n"
        "for x in data:\n    opt.zero_grad()\n    loss(x).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    opt.step()\n"
        "model.step(memory, state)\n")  # a decoder's step takes arguments: not an optimizer's
    assert _training_calls(loop) == {"torch.optim", "zero_grad()", "backward()", "clip_grad_norm_()", "step()"}
    assert _training_calls(ast.parse("y = model.step(memory, state, y_prev)\n")) == set()
