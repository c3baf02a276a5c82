"""Walkthroughs start with inputs and parameters and cite the paper (that the Chinese ones have no English
left: test_chinese_walkthroughs_have_no_english_words.py)."""

from __future__ import annotations

import pytest

from attnlab.cli import main
from attnlab.explain import builtin_names, document, load, render, run
from attnlab.explain.mechanisms import MECHANISMS, PAPERS


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
