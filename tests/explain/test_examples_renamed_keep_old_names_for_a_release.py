"""The built-in examples are named after what they are; their 0.1 names still load for one release."""

from attnlab.cli import main
from attnlab.explain import builtin_names, load
from attnlab.explain.examples import OLD_NAMES


def test_an_old_name_loads_the_renamed_example():
    old, new = load("seed-000-additive"), load("tutorial1-additive")
    assert old.name == new.name == "tutorial1-additive"
    assert old.text == new.text and old.title == "Tutorial 1, section 3: additive (Bahdanau) attention over three words"


def test_every_old_name_points_at_a_shipped_example():
    assert set(OLD_NAMES.values()) <= set(builtin_names())
    assert not set(OLD_NAMES) & set(builtin_names())


def test_the_list_shows_only_the_new_names(capsys):
    assert main(["explain", "--list"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert names == builtin_names()
    assert "tutorial2-multi-head" in names
    assert "seed" not in out.lower()


def test_the_cli_runs_an_old_name(capsys):
    assert main(["explain", "--example", "seed-001-luong-dot"]) == 0
    assert capsys.readouterr().out.startswith("Tutorial 2, section 1.2: Luong dot-product scores\n")
