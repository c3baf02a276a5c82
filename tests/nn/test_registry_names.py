"""Registry names are spelled one way (hyphens); the old underscore spellings are aliases."""

import pytest

import attnlab
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
