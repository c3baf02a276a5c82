"""The worked-example format: the shipped JSON Schema and docs page are generated from the registry."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from attnlab.explain import builtin_names, load, parse
from attnlab.explain.mechanisms import MECHANISMS
from attnlab.explain.spec import as_json, format_doc, schema, schema_text

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[2]


def _validator():
    text = (resources.files("attnlab.explain") / "example.schema.json").read_text(encoding="utf-8")
    s = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def test_shipped_schema_is_generated_from_the_registry():
    text = (resources.files("attnlab.explain") / "example.schema.json").read_text(encoding="utf-8")
    assert text == schema_text(), "run: python -m attnlab.explain.spec"
    assert set(MECHANISMS) <= set(schema()["properties"]["mechanism"]["enum"])


def test_docs_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "examples-format.md").read_text(encoding="utf-8")
    assert page == format_doc(), "run: python -m attnlab.explain.spec"
    for name in MECHANISMS:
        assert f"## `{name}`" in page


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_example_validates(name):
    errors = list(_validator().iter_errors(as_json(load(name))))
    assert errors == [], [e.message for e in errors]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('mechanism = "additive"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[params]\nw_q = [[1.0]]\nv = [1.0]\n', "w_k"),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[params]\nnum_heads = 2\n', "num_heads"),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\n', "keys"),
        ('mechanism = "multi_head"\n[inputs]\nkeys = [[1.0]]\n[params]\nnum_heads = 1\n', "not valid under any"),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[[claim]]\nstep = "scores"\nvalue = 1\nindex = [0]\n', "0"),
    ],
)
def test_schema_rejects_bad_examples(text, words):
    errors = list(_validator().iter_errors(as_json(parse(text, "bad.toml"))))
    assert errors, text
    assert any(words in json.dumps(e.instance) + e.message for e in errors), [e.message for e in errors]


def test_hyphenated_spelling_validates():
    ex = parse('mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = 2\n', "mh.toml")
    assert list(_validator().iter_errors(as_json(ex))) == []


def test_the_names_list_and_the_runners_registry_agree():
    from attnlab.explain.mechanisms import MECHANISMS
    from attnlab.explain.names import NAMES

    assert list(NAMES) == list(MECHANISMS)


def test_main_writes_the_schema_beside_the_module_and_the_page_where_it_is_told(tmp_path, monkeypatch):
    from attnlab.explain import spec

    monkeypatch.setattr(spec, "SCHEMA_FILE", tmp_path / "example.schema.json")  # not the installed package's file
    assert spec.main([str(tmp_path / "format.md")]) == 0
    assert (tmp_path / "format.md").read_text(encoding="utf-8") == format_doc()
    assert json.loads((tmp_path / "example.schema.json").read_text(encoding="utf-8")) == schema()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    assert spec.main([]) == 0  # without an argument: the page of the docs, from the repository's root
    assert (tmp_path / "docs" / "examples-format.md").read_text(encoding="utf-8") == format_doc()
