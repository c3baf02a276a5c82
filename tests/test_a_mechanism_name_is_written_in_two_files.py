"""The one-concept check: a mechanism's name is written (as a string literal) in at most two source files.

Those two are its module file (``@register("name", aliases=...)`` in ``attnlab/nn``) and its walkthrough
record (``attnlab/explain/mechanisms.py``); every table that lists mechanisms (the registry, the alias
table, ``explain``'s names, the example schema, ``verify``'s recomputation) is read from those records.
Every ``.py`` file under ``src/attnlab`` is parsed; string constants count, the names in ``__all__`` (Python
identifiers) do not. The shipped JSON Schema is generated from the records (``tests/explain/test_spec.py``
checks that it is), and the worked examples (``explain/examples/*.toml``) are data, not tables.

``OTHER_CONCEPTS`` lists, per name, the files where the same word is written for something else (a
seq2seq decoder's kind, a score function, a key of a viewer's data, another library's argument) or
where code names one mechanism to use it (as a caller of ``create`` would): each with the reason. An
entry that is no longer true fails, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnlab
from attnlab.explain.mechanisms import MECHANISMS

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"

_SEQ2SEQ = "the seq2seq decoder's kind ('none' | 'bahdanau' | 'luong') of models.seq2seq and the verbs and experiments that train it"
_SCORE = "the score function's name ('dot', 'scaled_dot', 'general', ...) that functional.attention takes"
OTHER_CONCEPTS: dict[str, dict[str, str]] = {
    "bahdanau": {
        **dict.fromkeys(["cli/explain.py", "cli/train_seq2seq.py", "experiments/alignment.py", "experiments/bottleneck.py",
                         "experiments/faithfulness.py", "experiments/length.py", "models/seq2seq.py", "pretrained/make.py"],
                        _SEQ2SEQ),
        "explain/papers.py": "the paper's key (Bahdanau, Cho, Bengio 2015)",
    },
    "dot": dict.fromkeys(["cli/train_seq2seq.py", "explain/i18n.py", "explain/recompute.py", "explain/spec.py", "functional/attention.py",
                          "functional/scores.py", "functional/softcap.py", "functional/steps.py", "nn/luong.py"], _SCORE),
    "masked": dict.fromkeys(["cli/view.py", "explain/i18n.py", "viz/heatmap.py", "viz/hf.py", "viz/viewer.py"],
                            "a heatmap's masked cells: a key of the viewer's data and a legend's label"),
    "cross": dict.fromkeys(["cli/translate.py", "models/transformer.py", "viz/hf.py"],
                           "an encoder–decoder's cross-attention maps: a key of the maps a model returns"),
    "softcap": {
        "integrations/transformers.py": "transformers' own argument name (softcap=) of an attention call",
        "explain/hf_head.py": "reads that argument, and writes an example of this mechanism (a caller naming it)",
    },
    "scaled-dot": {"explain/hf_head.py": "writes an example of this mechanism (a caller naming it)"},
    "linear": dict.fromkeys(["experiments/rope_scaling.py", "nn/positional.py"], "RoPE's linear position scaling"),
    "channel": {"viz/viewer.py": "a vision map's kind, naming the viewer's axes"},
    "spatial": {"viz/viewer.py": "a vision map's kind, naming the viewer's axes"},
}
NAMES = sorted(set(attnlab.available()) | set(MECHANISMS))


def _literals(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exported = {id(n) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets) for n in ast.walk(node.value)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in exported}


LITERALS = {path.relative_to(SRC).as_posix(): _literals(path) for path in sorted(SRC.rglob("*.py"))}


def files_writing(name: str) -> set[str]:
    return {f for f, strings in LITERALS.items() if name in strings}


@pytest.mark.parametrize("name", NAMES)
def test_a_mechanism_name_is_written_in_at_most_two_files(name):
    files = files_writing(name) - set(OTHER_CONCEPTS.get(name, {}))
    assert len(files) <= 2, f"{name!r} is written in {sorted(files)}: read it from the mechanism's record instead"


@pytest.mark.parametrize("name", sorted(OTHER_CONCEPTS))
def test_every_listed_other_concept_is_still_written_there(name):
    stale = set(OTHER_CONCEPTS[name]) - files_writing(name)
    assert not stale, f"{name!r} is no longer written in {sorted(stale)}: remove it from OTHER_CONCEPTS"


def test_the_count_finds_a_name_where_it_is_written():
    assert files_writing("differential") == {"nn/differential.py", "explain/mechanisms.py"}
    assert "multi-head" not in _literals(SRC / "explain" / "names.py")  # the names list is read from the records
    assert "toy-temperature" not in {n for s in LITERALS.values() for n in s}  # the test's toy is not in src
