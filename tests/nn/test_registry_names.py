"""Registry names are spelled one way (hyphens); the old underscore spellings are aliases."""

import pytest
import torch

import attnlab
from attnlab.nn import registry as R
from attnlab.nn.registry import ALIASES, available, canonical, create, register


def test_registered_names_are_lower_case_with_hyphens():
    for name in available():
        assert name == name.lower() and "_" not in name, name


def test_every_alias_points_at_a_registered_name():
    assert set(ALIASES.values()) <= set(available())
    assert not set(ALIASES) & set(available())


@pytest.mark.parametrize("old,new", [("multi_head", "multi-head"), ("scaled_dot", "scaled-dot"),
                                      ("luong_general", "luong-general"), ("cross_attention", "cross")])
def test_old_spelling_builds_the_same_module(old, new):
    assert canonical(old) == new and canonical(new) == new
    assert type(attnlab.create(old, **_kwargs(new))) is type(create(new, **_kwargs(new)))


def _kwargs(name):
    return {"dim": 8, "num_heads": 2} if name in ("multi-head", "cross") else (
        {"query_dim": 4, "key_dim": 4} if name == "luong-general" else {})


def test_canonical_leaves_unknown_names_for_create_to_refuse():
    assert canonical("nope") == "nope"
    with pytest.raises(ValueError, match="unknown attention 'nope'"):
        create("nope")
    with pytest.raises(TypeError, match="str"):
        canonical(3)


def test_register_refuses_an_underscore_spelling():
    with pytest.raises(ValueError, match="hyphens"):
        register("my_attention")
    with pytest.raises(ValueError, match="hyphens"):
        register("scaled_dot")
    assert "my_attention" not in available()


def message(call, exc=ValueError):
    with pytest.raises(exc) as e:
        call()
    return str(e.value)


# --- the registry --------------------------------------------------------------------------------------


def test_canonical_and_its_message():
    assert R.canonical("luong_dot") == "luong-dot" and R.canonical("neighborhood_2d") == "neighborhood-2d"
    assert R.canonical("whatever") == "whatever"
    assert message(lambda: R.canonical(3), TypeError) == "an attention name must be a str; got int"
    assert message(lambda: R.canonical(None), TypeError) == "an attention name must be a str; got NoneType"


@pytest.mark.parametrize("name", ["My-attention", "my_attention", "multi_head", "UPPER"])
def test_register_message(name):
    assert message(lambda: R.register(name)) == (
        f"registered names are lower case with hyphens (not {name!r}); put old spellings in aliases")


class _Probe(torch.nn.Module):
    def __init__(self, a=1, b=2):
        super().__init__()
        self.a, self.b = a, b


def test_register_create_with_defaults_and_twice():
    try:
        assert R.register("probe-plain")(_Probe) is _Probe
        assert R.register("probe-defaults", a=10, b=20)(_Probe) is _Probe
        plain = R.create("probe-plain", b=5)
        assert type(plain) is _Probe and (plain.a, plain.b) == (1, 5)
        made = R.create("probe-defaults", b=7)  # the caller's keywords win over the registered defaults
        assert type(made) is _Probe and (made.a, made.b) == (10, 7)
        made = R.create("probe-defaults")
        assert (made.a, made.b) == (10, 20)
        assert "probe-plain" in R.available() and R.available() == sorted(R.available())
        deco = R.register("probe-plain")
        assert message(lambda: deco(_Probe)) == "attention name 'probe-plain' is registered twice"
    finally:
        R.RECORDS.pop("probe-plain", None)
        R.RECORDS.pop("probe-defaults", None)
    assert "probe-plain" not in R.available()


def test_create_unknown_names_every_available_name():
    text = message(lambda: R.create("nope"))
    assert text == f"unknown attention 'nope'; available: {', '.join(sorted(R.RECORDS))}"
    assert "luong-concat, luong-dot, luong-general" in text
    assert R.create("luong_dot", query_dim=2, key_dim=2).score == "dot"
    assert R.create("luong-concat", query_dim=2, key_dim=2).score == "concat"
    assert R.create("luong-general", query_dim=2, key_dim=3).score == "general"
    assert R.create("luong-general", query_dim=2, key_dim=2, score="dot").score == "dot"


def test_a_record_brings_its_aliases_and_refuses_a_taken_or_misspelled_one():
    try:
        R.register("probe-aliased", aliases=("probe-other",))(_Probe)
        assert R.ALIASES["probe-other"] == "probe-aliased" and R.canonical("probe_other") == "probe-aliased"
        assert type(R.create("probe-other")) is _Probe and R.record("probe_aliased").aliases == ("probe-other",)
        assert message(lambda: R.register("probe-again", aliases=("probe-other",))(_Probe)) == (
            "attention name 'probe-other' is registered twice")
        assert message(lambda: R.register("probe-again", aliases=("multi-head",))(_Probe)) == (
            "attention name 'multi-head' is registered twice")
        assert message(lambda: R.register("probe-again", aliases=("probe_under",))(_Probe)) == (
            "registered names are lower case with hyphens (not 'probe_under'); put old spellings in aliases")
        assert "probe-again" not in R.available() and "probe-under" not in R.ALIASES
    finally:
        R.RECORDS.pop("probe-aliased", None)
        R.ALIASES.pop("probe-other", None)
    assert R.canonical("probe-other") == "probe-other"
