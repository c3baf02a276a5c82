"""One spelling per mechanism: ``attnlab explain``, worked-example files and ``attnlab.create`` read every
name through the registry's one table, and every alias lands on one name in both."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.cli import main
from attnlab.explain import builtin_names, load, parse
from attnlab.explain.mechanisms import MECHANISMS
from attnlab.explain.names import NAMES, WALKTHROUGH_OF
from attnlab.explain.names import canonical as explain_name
from attnlab.nn.registry import ALIASES, canonical

# Every name that worked before the two tables became one, written out by hand: the registry's
# underscore spellings, explain's own names and explain's aliases (registry names), each with the
# one name it now means.
OLD_REGISTRY = {"multi_head": "multi-head", "scaled_dot": "scaled-dot", "luong_dot": "luong-dot",
                "luong_general": "luong-general", "luong_concat": "luong-concat",
                "neighborhood_2d": "neighborhood-2d", "cross_attention": "cross"}
OLD_EXPLAIN = {"dot": "dot", "scaled_dot": "scaled-dot", "general": "luong-general", "additive": "bahdanau",
               "concat": "luong-concat", "masked": "masked", "sparse": "sparse", "attentional": "attentional",
               "self_attention": "self-attention", "multi_head": "multi-head", "cross_attention": "cross",
               "channel": "channel", "spatial": "spatial", "softcap": "softcap", "linear": "linear",
               "differential": "differential", "latent": "mla", "gqa": "gqa", "neighborhood": "neighborhood-2d",
               "bahdanau": "bahdanau", "luong-dot": "dot", "luong-general": "luong-general",
               "luong-concat": "luong-concat", "cross": "cross", "mla": "mla", "neighborhood-2d": "neighborhood-2d",
               "multi-head": "multi-head", "scaled-dot": "scaled-dot", "self-attention": "self-attention"}


def test_one_table_every_alias_names_a_registered_mechanism():
    assert set(ALIASES.values()) <= set(attnlab.available())
    assert not set(ALIASES) & (set(attnlab.available()) | set(NAMES))
    assert all(k == k.lower() and "_" not in k for k in ALIASES)  # underscores are read by the rule, not the table


@pytest.mark.parametrize("old,new", sorted(OLD_REGISTRY.items()))
def test_registry_spellings_keep_building(old, new):
    assert canonical(old) == new
    assert new in attnlab.available()


@pytest.mark.parametrize("old,new", sorted(OLD_EXPLAIN.items()))
def test_explain_names_keep_working(old, new):
    assert explain_name(old) == new and new in MECHANISMS
    ex = parse(f'mechanism = "{old}"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n', "t.toml")
    assert ex.mechanism == new


def test_each_spelling_means_one_mechanism_in_both():
    """A name that the registry builds and explain walks through means the same mechanism in both
    (``luong-dot``, a module of its own, is walked through as ``dot``: the same score)."""
    spellings = set(OLD_REGISTRY) | set(OLD_EXPLAIN) | set(ALIASES) | set(attnlab.available()) | set(NAMES)
    for s in spellings:
        reg = canonical(s)
        if reg in MECHANISMS or reg in WALKTHROUGH_OF:
            assert explain_name(s) == WALKTHROUGH_OF.get(reg, reg), s
        if explain_name(s) in MECHANISMS and reg in attnlab.available():
            assert reg == explain_name(s) or WALKTHROUGH_OF[reg] == explain_name(s), s
    assert set(WALKTHROUGH_OF) <= set(attnlab.available()) and set(WALKTHROUGH_OF.values()) <= set(NAMES)


@pytest.mark.parametrize("old", ["additive", "general", "concat", "latent", "neighborhood", "cross_attention"])
def test_explain_names_build_the_module_too(old):
    kw = {"bahdanau": {"query_dim": 2, "key_dim": 2, "attn_dim": 2}, "luong-general": {"query_dim": 2, "key_dim": 2},
          "luong-concat": {"query_dim": 2, "key_dim": 2}, "mla": {"dim": 8, "num_heads": 2, "kv_latent_dim": 4},
          "neighborhood-2d": {"dim": 8, "num_heads": 2, "kernel_size": 3}, "cross": {"dim": 8, "num_heads": 2}}
    new = OLD_EXPLAIN[old]
    assert type(attnlab.create(old, **kw[new])) is type(attnlab.create(new, **kw[new]))


def test_builtin_examples_use_the_one_spelling():
    for name in builtin_names():
        assert load(name).mechanism in NAMES


@pytest.mark.parametrize("old", ["additive", "multi_head", "latent", "luong-dot", "cross-attention"])
def test_cli_takes_every_spelling(old, capsys):
    assert main(["explain", old]) == 0
    assert f"mechanism: {OLD_EXPLAIN.get(old, 'cross')}\n" in capsys.readouterr().out


def test_unknown_name_is_refused_as_written(capsys):
    assert main(["explain", "no_such_thing"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_thing'" in err and err.count("\n") == 1
    with pytest.raises(Exception, match="unknown mechanism 'no_such'"):
        parse('mechanism = "no_such"\n[inputs]\nquery = [1.0]\n', "t.toml")
