"""Where an example's error points, and how ``given_lines`` shows a value written as one number.

- ``Example.at("claim", key, nth)`` names the line of the nth ``[[claim]]`` table, counting claims
  only: another array of tables before them (``[[note]]``) does not shift the count.
- ``given_lines`` (public) writes a tensor that holds one number as ``name = value``, rounded like a
  mask (no decimals) or to ``digits`` places.
"""

from __future__ import annotations

from attnlab.explain import parse
from attnlab.explain.render_text import given_lines

TEXT = """mechanism = "dot"
[inputs]
query = [1.0, 0.0]
keys = [[1.0, 0.0], [0.0, 1.0]]
mask = 1
[[note]]
text = "another array of tables"
[[claim]]
step = "scores"
value = [1, 0]
[[claim]]
step = "weights"
value = 1
"""


def test_the_nth_claim_is_found_after_another_array_of_tables():
    ex = parse(TEXT, "e.toml")
    assert ex.at("claim", "step", 0) == "e.toml, line 9: [[claim]] #1"
    assert ex.at("claim", "step", 1) == "e.toml, line 12: [[claim]] #2"
    assert ex.at("claim", None, 1) == "e.toml, line 11: [[claim]] #2"


def test_given_lines_write_a_single_number_on_its_name_line():
    ex = parse(TEXT, "e.toml")
    lines = given_lines(ex, 3, "en")
    assert lines[0] == "" and lines[-1] == "  mask = 1"
    assert lines[1:5] == ["inputs:", "  query", "    [1.000  0.000]", "  keys"]
