"""Walkthroughs start with inputs and parameters, cite the paper, and have no English left in Chinese."""

from __future__ import annotations

import json
import re

import pytest

from attnlab.cli import main
from attnlab.explain import builtin_names, document, load, render, render_markdown, run, verify
from attnlab.explain.mechanisms import ALIASES, MECHANISMS, PAPERS

# Words that are mathematics or names, not English: function names in formulas and labels, the library.
MATH = {"tanh", "softmax", "exp", "MLP", "ReLU", "CBAM", "attnlab", "nan", "inf", "true", "false", "et", "al"}
WORD = re.compile(r"[A-Za-z][A-Za-z]+")


def _identifiers(ex, t) -> set[str]:
    names = set(t.names()) | set(ex.inputs) | set(ex.params) | set(MECHANISMS) | set(ALIASES) | MATH
    for p in PAPERS.values():
        names |= set(WORD.findall(p.authors))
    for v in ex.params.values():  # string parameters and pattern tables are identifiers too
        names |= set(WORD.findall(json.dumps(v, default=str)))
    for tok in (ex.tokens or []) + (ex.key_tokens or []):
        names |= set(WORD.findall(tok))
    return {w for n in names for w in WORD.findall(n)}


def english_left(ex, t, text: str) -> list[str]:
    formulas = {f for step in t for f in (step.formula, step.latex) if f}
    for f in sorted(formulas, key=len, reverse=True):  # the library's own formulas stay as written
        text = text.replace(f, " ")
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"\\(begin|end)\{\w+\}", " ", text)  # LaTeX environments
    text = re.sub(r"\\[A-Za-z]+", " ", text)  # LaTeX commands
    text = re.sub(r"attnlab(\.\w+)+", " ", text)  # module names
    ids = _identifiers(ex, t)
    return [w for w in WORD.findall(text) if w not in ids and w.lower() not in ids]


@pytest.mark.parametrize("name", builtin_names())
def test_zh_walkthrough_has_no_english(name):
    ex = load(name)
    t = run(ex)
    v = verify(ex, t)
    for out in (render(ex, t, v, lang="zh"), render_markdown(ex, t, v, lang="zh")):
        assert english_left(ex, t, out) == [], out


def test_the_scan_finds_english():
    ex = load("tutorial1-additive")
    t = run(ex)
    assert english_left(ex, t, render(ex, t, verify(ex, t), lang="en"))  # the English walkthrough is caught


@pytest.mark.parametrize("name", builtin_names())
def test_walkthrough_starts_with_inputs_and_parameters(name):
    ex = load(name)
    t = run(ex)
    out = render(ex, t)
    before = out.split("\nStep 1.")[0]
    assert "\ninputs:\n" in before
    for key in ex.inputs:
        assert f"\n  {key}" in before, key
    for key in ex.params:
        assert f"\n  {key}" in before, key
    if ex.params:
        assert "\nparameters:\n" in before
    paper = PAPERS[MECHANISMS[ex.mechanism].paper]
    assert f"paper: {paper.authors} {paper.year}, {paper.url}" in before
    assert not ex.source or ex.source not in out  # the source is in --format json, not in the text
    doc = document(ex, t)
    assert set(doc["inputs"]) == set(ex.inputs) and set(doc["params"]) == set(ex.params)
    assert doc["paper"]["url"] == paper.url


def test_inputs_show_the_written_numbers():
    ex = load("tutorial1-additive")
    out = render(ex, run(ex))
    q = [float(x) for x in ex.inputs["query"]]
    assert "  query\n    [" + "  ".join(f"{x:.4f}" for x in q) + "]" in out


def test_explain_example_without_the_mechanism(capsys):
    assert main(["explain", "--example", "tutorial2-multi-head"]) == 0
    out = capsys.readouterr().out
    assert "Step 1." in out and "mechanism: multi-head" in out
    assert main(["explain", "multi-head", "--example", "tutorial2-multi-head"]) == 0
    assert capsys.readouterr().out == out
    assert main(["explain", "bahdanau", "--example", "tutorial1-additive"]) == 0  # nn's name for it
    assert main(["explain", "dot", "--example", "tutorial1-additive"]) == 2
    assert "is a 'bahdanau' example" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["explain", "verify"])
def test_missing_file_says_so(tmp_path, capsys, verb):
    missing = str(tmp_path / "nope.toml")
    argv = ["explain", "--file", missing] if verb == "explain" else ["verify", missing]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err and missing in err and "Traceback" not in err


def test_hyphenated_mechanism_in_a_file(tmp_path, capsys):
    f = tmp_path / "mh.toml"
    f.write_text('mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0], [0.0, 1.0]]\n[params]\nnum_heads = 2\n',
                 encoding="utf-8")
    assert load(str(f)).mechanism == "multi-head"
    assert main(["explain", "--file", str(f)]) == 0
