"""``load_json``: the error names what is wrong with a file's weights, and an explain document keeps its labels."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlab.viz.viewer import load_json


def _write(tmp_path, doc) -> str:
    f = tmp_path / "a.json"
    f.write_text(json.dumps(doc), encoding="utf-8")
    return str(f)


@pytest.mark.parametrize("layers, says", [
    ([[[0.5, 0.5], [0.25, "x"]]], "weights must be numbers in [0, 1]; layers[0][1][1] is 'x' (a str)"),
    ([[[[0.5, 0.5]], [[1.5, 0.0]]]], "weights must be in [0, 1]; layers[0][1][0][0] is 1.5"),
    ([[0.5, -0.25]], "weights must be in [0, 1]; layers[0][1] is -0.25 (negative)"),
    ([[[0.5, True]]], "weights must be numbers in [0, 1]; layers[0][0][1] is True (a bool)"),
])
def test_a_bad_weight_is_named_by_its_place_in_the_file(tmp_path, layers, says):
    path = _write(tmp_path, {"layers": layers})
    with pytest.raises(ValueError) as e:
        load_json(path)
    assert str(e.value) == f"{path}: {says}"


def test_ragged_layers_are_refused_as_not_rectangular(tmp_path):
    path = _write(tmp_path, {"layers": [[[0.5, 0.5], [1.0]]]})  # a 2-key row, then a 1-key row
    with pytest.raises(ValueError) as e:
        load_json(path)
    assert str(e.value) == (f"{path}: layers is not rectangular: every layer and head must be a q × k matrix "
                            "like the first")


def _document(tokens, key_tokens, weights):
    """An ``attnlab explain --format json`` document, cut down to what the viewer reads."""
    return {"title": "t", "tokens": tokens, "key_tokens": key_tokens,
            "steps": [{"name": "scores", "value": weights}, {"name": "weights", "value": weights}]}


def test_an_explain_document_keeps_token_labels_that_fit_its_queries(tmp_path):
    w = [[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]]  # 2 queries × 3 keys
    v = load_json(_write(tmp_path, _document(["a", "b"], ["x", "y", "z"], w)))
    assert v["tokens"] == ["a", "b"] and v["key_tokens"] == ["x", "y", "z"]
    np.testing.assert_array_equal(v["layers"], np.array([[w]], np.float32))
    sq = load_json(_write(tmp_path, _document(["<s>", "a"], None, [[1.0, 0.0], [0.5, 0.5]])))
    assert sq["tokens"] == ["<s>", "a"] and sq["key_tokens"] == ["<s>", "a"]  # self-attention: keys are the tokens
    # labels that fit neither the queries nor the keys are dropped: rows and columns are numbered from 1
    odd = load_json(_write(tmp_path, _document(["a", "b", "c", "d"], None, w)))
    assert odd["tokens"] == ["1", "2"] and odd["key_tokens"] == ["1", "2", "3"]
    assert odd["title"] == "t"
