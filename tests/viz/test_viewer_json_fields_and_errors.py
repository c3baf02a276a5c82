"""The viewer's data, field by field: what ``normalise`` completes, what ``payload`` puts in the page (labels,
axes, packed weights, masks, queries and keys, start state), what ``load_json`` and ``check_start`` refuse
and the exact words they say, and the page's text escapes."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
import pytest
import torch

from attnlab.viz import viewer as V


def _unpack(e, dtype):
    return np.frombuffer(zlib.decompress(base64.b64decode(e["b64"])), dtype=dtype).reshape(
        e["shape"]
    )


def _err(call) -> str:
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


# --- normalise and its sections ----------------------------------------------------------------------------


def test_normalise_completes_one_section_with_numbered_labels_and_default_axes():
    v = V.normalise({"layers": [[0.25, 0.75], [1.0, 0.0]]})
    assert isinstance(v, V.View)
    assert v["title"] == "attention" and [s["name"] for s in v["sections"]] == ["attention"]
    assert v["layers"].dtype == np.float32 and v["layers"].shape == (1, 1, 2, 2)
    np.testing.assert_array_equal(v["layers"][0, 0], [[0.25, 0.75], [1.0, 0.0]])
    assert (v["tokens"], v["key_tokens"]) == (["1", "2"], ["1", "2"])
    assert (v["x_axis"], v["y_axis"]) == ("key", "query")
    assert "name" not in v and "masked" not in v and "queries" not in v
    assert set(v) == {"title", "sections", "layers", "tokens", "key_tokens", "x_axis", "y_axis"}


def test_normalise_keeps_names_axes_titles_and_labels_as_strings():
    data = {
        "title": 7,
        "sections": [
            {
                "name": "enc",
                "layers": np.full((2, 3, 2, 2), 0.5),
                "tokens": [1, 2],
                "x_axis": "src",
                "y_axis": "out",
            },
            {"layers": np.full((1, 2), 0.5), "tokens": ["a"], "key_tokens": ["x", "y"]},
            {"name": "", "layers": np.full((1, 1), 1.0)},
        ],
    }
    v = V.normalise(data)
    assert v["title"] == "7"
    assert [s["name"] for s in v["sections"]] == ["enc", "section 2", "section 3"]
    first = v["sections"][0]
    assert (
        first["tokens"] == ["1", "2"]
        and first["key_tokens"] == ["1", "2"]
        and (first["x_axis"], first["y_axis"]) == ("src", "out")
    )
    assert (
        v["tokens"] == ["1", "2"] and v["x_axis"] == "src" and v["layers"].shape == (2, 3, 2, 2)
    )  # the first section's
    assert v["sections"][1]["tokens"] == ["a"] and v["sections"][1]["key_tokens"] == ["x", "y"]


def test_a_normalised_view_is_taken_as_it_is_and_anything_else_is_checked():
    v = V.normalise({"layers": np.full((1, 1, 1, 1), 1.0)})
    assert V.normalise(v) is v
    plain = {"sections": v["sections"]}  # a dict, not a View: completed again
    assert isinstance(V.normalise(plain), V.View) and V.normalise(plain) is not plain
    lists = V.View(sections=[{"layers": [[1.0]]}])  # a View whose weights are still lists
    out = V.normalise(lists)
    assert out is not lists and out["sections"][0]["layers"].shape == (1, 1, 1, 1)


def test_tokens_that_label_the_keys_of_a_cross_attention_label_the_keys_only():
    v = V.normalise({"layers": np.full((1, 1, 2, 3), 1 / 3), "tokens": ["a", "b", "c"]})
    assert v["tokens"] == ["1", "2"] and v["key_tokens"] == ["a", "b", "c"]
    sq = V.normalise({"layers": np.full((2, 2), 0.5), "tokens": ["a", "b"]})
    assert sq["tokens"] == ["a", "b"] and sq["key_tokens"] == ["a", "b"]


@pytest.mark.parametrize(
    "data, says",
    [
        ({}, "viewer data needs 'layers' (layers × heads × q × k weights)"),
        ({"layers": None}, "viewer data needs 'layers' (layers × heads × q × k weights)"),
        ({"layers": np.zeros((2, 3)), "tokens": ["a"]}, "'tokens' has 1 labels for 2 queries"),
        ({"layers": np.zeros((2, 3)), "key_tokens": ["a"]}, "'key_tokens' has 1 labels for 3 keys"),
        (
            {"layers": [0.5, 0.5]},
            "layers must be (q, k), (heads, q, k) or (layers, heads, q, k) nested lists; got depth 1",
        ),
        (
            {"layers": [[[[[0.5]]]]]},
            "layers must be (q, k), (heads, q, k) or (layers, heads, q, k) nested lists; got depth 5",
        ),
        (
            {"layers": np.zeros((1, 1, 2, 2)), "queries": np.zeros((2, 2))},
            "queries must have 4 dimensions; got shape (2, 2)",
        ),
        (
            {
                "layers": np.zeros((1, 1, 2, 3)),
                "queries": np.zeros((1, 1, 3, 4)),
                "keys": np.zeros((1, 1, 3, 4)),
            },
            "'queries' has shape (1, 1, 3, 4); expected (1, 1, 2, d)",
        ),
        (
            {
                "layers": np.zeros((1, 1, 2, 3)),
                "queries": np.zeros((1, 1, 2, 4)),
                "keys": np.zeros((1, 2, 3, 4)),
            },
            "'keys' has shape (1, 2, 3, 4); expected (1, 1, 3, d)",
        ),
        (
            {"layers": np.zeros((1, 1, 2, 3)), "queries": np.zeros((1, 1, 2, 4))},
            "the neuron view needs both 'queries' and 'keys', with one head size",
        ),
        (
            {"layers": np.zeros((1, 1, 2, 3)), "keys": np.zeros((1, 1, 3, 4))},
            "the neuron view needs both 'queries' and 'keys', with one head size",
        ),
        (
            {
                "layers": np.zeros((1, 1, 2, 3)),
                "queries": np.zeros((1, 1, 2, 4)),
                "keys": np.zeros((1, 1, 3, 5)),
            },
            "the neuron view needs both 'queries' and 'keys', with one head size",
        ),
    ],
)
def test_viewer_data_that_does_not_fit_is_refused_by_name(data, says):
    assert _err(lambda: V.normalise(data)) == says


def test_missing_and_infinite_list_entries_are_no_weight_and_masks_broadcast_to_a_copy():
    v = V.normalise(
        {"layers": [[0.5, None], ["inf", 1]], "masked": [[False, True], [False, False]]}
    )
    np.testing.assert_array_equal(v["layers"][0, 0], [[0.5, np.nan], [np.nan, 1.0]])
    heads = V.normalise(
        {"layers": np.full((2, 3, 2, 2), 0.5), "masked": np.array([[False, True], [False, False]])}
    )
    m = heads["masked"]
    assert m.dtype == bool and m.shape == (2, 3, 2, 2) and m.flags.writeable
    assert m[:, :, 0, 1].all() and m.sum() == 6
    qk = V.normalise(
        {
            "layers": np.zeros((1, 1, 2, 3)),
            "queries": torch.ones(1, 1, 2, 4, dtype=torch.float64),
            "keys": np.ones((1, 1, 3, 4)),
        }
    )
    assert qk["queries"].dtype == np.float32 and qk["keys"].dtype == np.float32


# --- the page's data ---------------------------------------------------------------------------------------


def test_payload_lists_each_sections_fields_and_packs_its_arrays():
    w = np.array([[[[0.25, 0.75, 0.0], [0.5, 0.5, 0.0]]]], np.float32)
    masked = np.array([[False, False, True], [False, False, True]])
    q, k = np.arange(4.0).reshape(1, 1, 2, 2), np.arange(6.0).reshape(1, 1, 3, 2)
    p = V.payload(
        {
            "title": "T",
            "layers": w,
            "tokens": ["a", "b"],
            "key_tokens": ["x", "y", "z"],
            "masked": masked,
            "queries": q,
            "keys": k,
            "x_axis": "src",
            "y_axis": "tgt",
        },
        start={"view": "matrix", "query": 2},
    )
    assert set(p) == {"title", "sections", "start"}
    assert p["title"] == "T" and p["start"] == {"view": "matrix", "query": 2}
    (s,) = p["sections"]
    assert list(s) == [
        "name",
        "tokens",
        "key_tokens",
        "x_axis",
        "y_axis",
        "weights",
        "masked",
        "queries",
        "keys",
    ]
    assert (s["name"], s["tokens"], s["key_tokens"], s["x_axis"], s["y_axis"]) == (
        "attention",
        ["a", "b"],
        ["x", "y", "z"],
        "src",
        "tgt",
    )
    assert (s["weights"]["dtype"], s["weights"]["shape"]) == ("float32", [1, 1, 2, 3])
    np.testing.assert_array_equal(_unpack(s["weights"], "<f4"), w)
    assert (s["masked"]["dtype"], s["masked"]["shape"]) == ("bits", [1, 1, 2, 3])
    bits = np.unpackbits(
        np.frombuffer(zlib.decompress(base64.b64decode(s["masked"]["b64"])), np.uint8)
    )
    assert bits.tolist() == [0, 0, 1, 0, 0, 1, 0, 0]  # six cells, padded to a byte
    for key, want in (("queries", q), ("keys", k)):
        assert (s[key]["dtype"], s[key]["shape"]) == ("float32", list(want.shape))
        np.testing.assert_array_equal(_unpack(s[key], "<f4"), want)
    plain = V.payload({"layers": w})
    assert plain["start"] == {} and list(plain["sections"][0]) == [
        "name",
        "tokens",
        "key_tokens",
        "x_axis",
        "y_axis",
        "weights",
    ]
    assert plain["title"] == "attention"


def test_payload_packs_with_zlib_level_6_in_base64():
    w = np.full((1, 1, 2, 2), 0.5, np.float32)
    e = V.payload({"layers": w})["sections"][0]["weights"]
    assert e["b64"] == base64.b64encode(zlib.compress(w.astype("<f4").tobytes(), 6)).decode("ascii")


def test_auto_precision_is_float32_up_to_2_to_the_20_weights():
    assert V.FLOAT32_LIMIT == 1 << 20
    at = V.payload({"layers": np.zeros((1, 1, 1024, 1024), np.float32)})["sections"][0]["weights"]
    assert at["dtype"] == "float32"
    two = V.payload(
        {"sections": [{"layers": np.zeros((1, 1, 2, 2))}, {"layers": np.zeros((1, 1, 1025, 1024))}]}
    )
    assert [s["weights"]["dtype"] for s in two["sections"]] == ["float32", "uint8"]
    forced = V.payload({"layers": np.zeros((1, 1, 2, 2))}, precision="uint8")["sections"][0][
        "weights"
    ]
    assert forced["dtype"] == "uint8"


def test_uint8_weights_are_w_times_254_rounded_clipped_and_255_for_none():
    w = np.array([[[[0.5, 1.2, -0.1, np.nan, np.inf, 0.003, 0.001]]]])
    e = V.encode_weights(w, "uint8")
    assert e["dtype"] == "uint8" and e["shape"] == [1, 1, 1, 7]
    assert _unpack(e, np.uint8).ravel().tolist() == [127, 254, 0, 255, 255, 1, 0]
    f = V.encode_weights(np.array([[0.5, np.nan]], np.float64), "float32")
    assert f["dtype"] == "float32" and f["shape"] == [1, 2]
    np.testing.assert_array_equal(_unpack(f, "<f4"), [[0.5, np.nan]])
    assert (
        _err(lambda: V.encode_weights(w, "int4"))
        == "precision must be 'auto', 'float32' or 'uint8'; got 'int4'"
    )


# --- the start state ------------------------------------------------------------------------------------------


_SECTION = {"layers": np.zeros((2, 3, 4, 4))}


@pytest.mark.parametrize(
    "start, says",
    [
        (
            {"zoom": 2, "colour": "red"},
            "the page's start state has view, layer, head and query; got colour, zoom",
        ),
        ({"view": "grid"}, "the start view must be one of head, model, neuron, matrix; got 'grid'"),
        ({"layer": 0}, "the start layer counts from 1 and must be in 1..2; got 0"),
        ({"layer": 3}, "the start layer counts from 1 and must be in 1..2; got 3"),
        ({"head": 4}, "the start head counts from 1 and must be in 1..3; got 4"),
        ({"query": 5}, "the start query counts from 1 and must be in 1..4; got 5"),
        ({"query": True}, "the start query counts from 1 and must be in 1..4; got True"),
        ({"head": 1.0}, "the start head counts from 1 and must be in 1..3; got 1.0"),
    ],
)
def test_check_start_refuses_by_name(start, says):
    assert _err(lambda: V.check_start(start, _SECTION)) == says


def test_check_start_keeps_what_is_given_within_the_sizes():
    assert V.check_start(None, _SECTION) == {} and V.check_start({}, _SECTION) == {}
    full = {"view": "neuron", "layer": 2, "head": 3, "query": 4}
    assert V.check_start(full, _SECTION) == full
    assert V.check_start({"view": "head", "layer": 1, "head": None}, _SECTION) == {
        "view": "head",
        "layer": 1,
    }
    assert V.VIEWS == ("head", "model", "neuron", "matrix")


# --- load_json --------------------------------------------------------------------------------------------------


def _write(tmp_path, text, name="a.json"):
    f = tmp_path / name
    f.write_text(text if isinstance(text, str) else json.dumps(text), encoding="utf-8")
    return f


def test_load_json_reads_weights_at_the_ends_of_0_to_1(tmp_path):
    v = V.load_json(
        _write(tmp_path, {"layers": [[0.0, 1.0], [1.0000005, 0]], "tokens": ["a", "b"]})
    )
    np.testing.assert_allclose(v["layers"][0, 0], [[0.0, 1.0], [1.0000005, 0.0]])
    assert v["tokens"] == ["a", "b"] and v["title"] == "attention"


@pytest.mark.parametrize(
    "doc, says",
    [
        ({"layers": [[1.000002, 0.0]]}, "weights must be in [0, 1]; layers[0][0] is 1.000002"),
        (
            '{"layers": [[NaN, 0.5]]}',
            "weights must be finite numbers in [0, 1]; layers[0][0] is nan (NaN or infinite)",
        ),
        (
            '{"layers": [[0.5, Infinity]]}',
            "weights must be finite numbers in [0, 1]; layers[0][1] is inf (NaN or infinite)",
        ),
        (
            {"layers": [[None, 0.5]]},
            "weights must be numbers in [0, 1]; layers[0][0] is None (a NoneType)",
        ),
        ({"layers": [[0.5, 0.5]], "tokens": "ab"}, "'tokens' must be a list of strings; got str"),
        (
            {"layers": [[0.5, 0.5]], "key_tokens": ["a", 3]},
            "'key_tokens' must be strings (the token labels); key_tokens[1] is 3 (a int)",
        ),
        (
            {"layers": [[0.5, 0.5]], "tokens": ["a", "b", "c"]},
            "'tokens' has 3 labels for 1 queries",
        ),
        (
            {"sections": [{"layers": [[0.5]]}, {"layers": [[2]]}]},
            "weights must be in [0, 1]; layers[0][0] is 2",
        ),
        (
            {"sections": [{"layers": [[0.5]], "tokens": [1]}]},
            "'tokens' must be strings (the token labels); tokens[0] is 1 (a int)",
        ),
        ({"tokens": ["a"]}, "weights must be numbers in [0, 1]; layers is None (a NoneType)"),
    ],
)
def test_load_json_names_the_file_and_what_is_wrong(tmp_path, doc, says):
    f = _write(tmp_path, doc)
    assert _err(lambda: V.load_json(f)) == f"{f}: {says}"


def test_load_json_refuses_what_is_not_a_json_object(tmp_path):
    f = _write(tmp_path, "{not json")
    assert (
        _err(lambda: V.load_json(f))
        == f"{f}: not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    )
    g = _write(tmp_path, [1, 2], "list.json")
    assert (
        _err(lambda: V.load_json(g))
        == f"{g}: expected a JSON object with 'layers' (or 'steps'); got list"
    )


def test_an_explain_document_gives_its_weights_masked_scores_and_title(tmp_path):
    doc = {
        "title": "causal",
        "tokens": ["a", "b"],
        "steps": [
            {"name": "masked_scores", "value": [[0.0, "-inf"], [0.5, 0.25]]},
            {"name": "weights", "value": [[1.0, 0.0], [0.5, 0.5]]},
        ],
    }
    v = V.load_json(_write(tmp_path, doc))
    assert v["title"] == "causal" and v["tokens"] == ["a", "b"]
    np.testing.assert_array_equal(v["masked"][0, 0], [[False, True], [False, False]])
    np.testing.assert_array_equal(v["layers"][0, 0], [[1.0, 0.0], [0.5, 0.5]])
    row = V.load_json(
        _write(
            tmp_path,
            {
                "steps": [
                    {"name": "masked_scores", "value": [0.1, "-inf", 0.2]},
                    {"name": "weights", "value": [0.5, 0.0, 0.5]},
                ]
            },
            "row.json",
        )
    )
    assert row["layers"].shape == (1, 1, 1, 3) and row["title"] == "attention"
    assert row["masked"][0, 0].tolist() == [[False, True, False]]
    f = _write(tmp_path, {"steps": [{"name": "scores", "value": [0.5]}]}, "none.json")
    assert _err(lambda: V.load_json(f)) == "this JSON document has no 'weights' step"


# --- examples ----------------------------------------------------------------------------------------------------


def test_from_example_names_the_axes_of_spatial_and_channel_maps_and_keeps_grouped_keys():
    from attnlab.explain import load, run

    ch = load("attnlab-channel")
    v = V.from_example(ch, run(ch))
    assert (v["y_axis"], v["x_axis"]) == ("query", "channel")  # one row of channel weights
    assert v["layers"].shape == (1, 1, 1, 3) and v["title"] == ch.title
    gqa = load("attnlab-gqa")
    t = run(gqa)
    g = V.from_example(gqa, t)
    assert (g["y_axis"], g["x_axis"]) == ("query", "key") and "masked" not in g
    np.testing.assert_array_equal(
        g["keys"], t["key_groups"].value.numpy()
    )  # each query head's key group
    np.testing.assert_array_equal(g["queries"], t["query_heads"].value.numpy())


# --- the page ------------------------------------------------------------------------------------------------------


def test_script_json_is_compact_ascii_without_markup_characters():
    assert (
        V.script_json({"a": "<b>&é", "n": [1, 2]})
        == '{"a":"\\u003cb\\u003e\\u0026\\u00e9","n":[1,2]}'
    )


def test_the_page_title_is_escaped_text_and_the_view_renders_and_saves(tmp_path):
    v = V.normalise({"title": "a<b & c", "layers": [[1.0]]})
    page = v.html()
    assert "<title>a&lt;b &amp; c</title>" in page
    assert "__TITLE__" not in page and "__DATA__" not in page
    assert V._html_text("x\udc80<") == "x" + "\ufffd" * 3 + "&lt;"  # each of its 3 bytes replaced
    out = v.save(tmp_path / "v.html", precision="uint8", start={"view": "model"})
    assert out == tmp_path / "v.html"
    data = json.loads(
        out.read_text(encoding="utf-8").split('id="data">', 1)[1].split("</script>", 1)[0]
    )
    assert data["start"] == {"view": "model"} and data["sections"][0]["weights"]["dtype"] == "uint8"
    assert V.write_html({"layers": [[1.0]]}, tmp_path / "w.html") == tmp_path / "w.html"
    page2 = v.html(precision="uint8", start={"head": 1})
    assert json.loads(page2.split('id="data">', 1)[1].split("</script>", 1)[0])["start"] == {
        "head": 1
    }
    frame = v._repr_html_()
    assert frame.endswith('" style="width:100%;height:720px;border:1px solid #ddd"></iframe>')


def test_attention_json_writes_only_the_fields_given():
    s = V.attention_json(["a"], np.array([[[[0.1234567, 0.8765433]]]]), key_tokens=["x", "y"])
    # each weight as the shortest decimal of its float32 (the model's own number, not 6 decimals of it)
    assert s == {"tokens": ["a"], "key_tokens": ["x", "y"], "layers": [[[[0.1234567, 0.8765433]]]]}
    assert V.attention_json(["a"], np.array([[[[1 / 3, 2 / 3]]]]), key_tokens=["x", "y"])["layers"] == [[[[0.33333334, 0.6666667]]]]
    assert list(V.attention_json(["a"], np.ones((1, 1, 1, 1)), x_axis="src")) == [
        "tokens",
        "x_axis",
        "layers",
    ]
    assert list(V.attention_json(["a"], np.ones((1, 1, 1, 1)), y_axis="tgt")) == [
        "tokens",
        "y_axis",
        "layers",
    ]
    assert list(V.attention_json(["a"], np.ones((1, 1, 1, 1)), name="n")) == [
        "name",
        "tokens",
        "layers",
    ]
    assert _err(lambda: V.attention_json(["a", "b"], np.ones((2, 3)))) == (
        "maps must be (layers, h, q, k) with q=2 tokens and k=2 key tokens; got (2, 3)"
    )
    assert _err(lambda: V.attention_json(["a"], np.ones((1, 1, 1, 2)), key_tokens=["x"])) == (
        "maps must be (layers, h, q, k) with q=1 tokens and k=1 key tokens; got (1, 1, 1, 2)"
    )
    assert _err(lambda: V.attention_json(["a"], np.ones((1, 1, 2, 1)))) == (
        "maps must be (layers, h, q, k) with q=1 tokens and k=1 key tokens; got (1, 1, 2, 1)"
    )
