"""``attention_json``: one section of the viewer's JSON, the format ``load_json`` reads back."""

import json

import numpy as np
import pytest
import torch

from attnlab.viz.viewer import attention_json, load_json


def test_a_cross_attention_section_round_trips_through_load_json(tmp_path):
    w = torch.tensor([[[[0.25, 0.75, 0.0], [1 / 3, 1 / 3, 1 / 3]]]])  # (1 layer, 1 head, 2 queries, 3 keys)
    s = attention_json(["a", "b"], w, key_tokens=["x", "y", "z"], name="cross", y_axis="out", x_axis="src")
    assert s == {"name": "cross", "tokens": ["a", "b"], "key_tokens": ["x", "y", "z"], "x_axis": "src", "y_axis": "out",
                 "layers": [[[[0.25, 0.75, 0.0], [0.33333334, 0.33333334, 0.33333334]]]]}  # float32's 1/3
    assert "key_tokens" not in attention_json(["a"], np.ones((1, 1, 1, 1)))  # self-attention: keys are the queries
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"title": "t", "sections": [s, attention_json(["p"], np.ones((2, 1, 1, 1)))]}))
    view = load_json(f)
    assert [x["name"] for x in view["sections"]] == ["cross", "section 2"]
    assert view["sections"][0]["key_tokens"] == ["x", "y", "z"] and view["sections"][0]["x_axis"] == "src"
    assert view["sections"][1]["layers"].shape == (2, 1, 1, 1)


def test_the_file_holds_the_models_float32_weights_exactly_so_the_page_rounds_as_the_cli():
    from attnlab.explain.render_text import fmt_number

    rng = np.random.default_rng(0)
    w = rng.random((2, 3, 4, 5)).astype(np.float32)
    w[0, 0, 0, :2] = [0.1250004, 0.5653]  # 6 decimals would make the first 0.125, an exact tie printed 0.12
    back = np.array(json.loads(json.dumps(attention_json(list("abcd"), w, key_tokens=list("vwxyz"))))["layers"],
                    dtype=np.float32)
    assert np.array_equal(back, w)
    assert [fmt_number(float(x), 2) for x in back[0, 0, 0, :2]] == ["0.13", "0.57"]  # as translate prints them


def test_labels_that_do_not_fit_the_weights_are_refused():
    with pytest.raises(ValueError, match=r"q=2 tokens and k=2 key tokens; got \(1, 1, 2, 3\)"):
        attention_json(["a", "b"], np.zeros((1, 1, 2, 3)))
    with pytest.raises(ValueError, match=r"\(layers, h, q, k\)"):
        attention_json(["a", "b"], np.zeros((2, 3)), key_tokens=["x", "y", "z"])


def test_a_models_weights_are_taken_as_they_come_with_gradients_and_in_bfloat16():
    w = torch.tensor([[[[0.25, 0.75]]]], dtype=torch.bfloat16, requires_grad=True)  # straight from a forward pass
    assert attention_json(["a"], w, key_tokens=["x", "y"])["layers"] == [[[[0.25, 0.75]]]]


@pytest.mark.parametrize("data, says", [
    ({"layers": np.zeros(5)}, "layers must have 2 or 3 or 4 dimensions; got shape (5,)"),
    ({"layers": np.zeros((1, 1, 1, 2, 2))}, "layers must have 2 or 3 or 4 dimensions; got shape (1, 1, 1, 2, 2)"),
    ({"layers": np.zeros((2, 2)), "masked": np.zeros(2, dtype=bool)}, "masked must have 2 or 3 or 4 dimensions; got shape (2,)"),
    ({"layers": np.zeros((2, 2)), "masked": np.zeros((3, 2), dtype=bool)},
     "'masked' has shape (1, 1, 3, 2); it must broadcast to the weights' (1, 1, 2, 2)"),
])
def test_weights_and_masks_of_the_wrong_rank_are_refused_by_name(data, says):
    from attnlab.viz.viewer import normalise

    with pytest.raises(ValueError) as e:
        normalise(data)
    assert str(e.value) == says


def test_a_causal_mask_travels_in_the_file_and_reads_back_as_masked(tmp_path):
    w = torch.tensor([[[[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.2, 0.3, 0.5]]]])  # one causal head
    causal = torch.ones(3, 3, dtype=torch.bool).triu(1)
    s = attention_json(list("abc"), w, masked=causal)
    assert s["masked"] == [[False, True, True], [False, False, True], [False, False, False]]
    f = tmp_path / "a.json"
    f.write_text(json.dumps(s))
    view = load_json(f)
    assert view["masked"].shape == (1, 1, 3, 3) and (view["masked"][0, 0] == causal.numpy()).all()
    with pytest.raises(ValueError) as e:
        attention_json(list("abc"), w, masked=np.zeros((2, 3), bool))
    assert str(e.value) == "masked must be (q, k) = (3, 3) or the maps' (1, 1, 3, 3); got (2, 3)"
