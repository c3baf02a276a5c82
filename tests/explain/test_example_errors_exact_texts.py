"""Every refusal of a malformed worked example, with its exact text: the file, the line of the field at
fault (or of its table, or none where the table is absent), the field, and what was expected. Also: a
non-number or a bit that is not 0/1 is named as such, not reported as a ragged row."""

from __future__ import annotations

import re

import pytest

from attnlab.explain import ExampleError, load, parse, run, verify

KNOWN = (
    "attentional, bahdanau, channel, cross, differential, dot, gqa, linear, luong-concat, luong-general, masked, "
    "mla, multi-head, neighborhood-2d, scaled-dot, self-attention, softcap, sparse, spatial, target-attention"
)
PATTERNS = (
    "full, causal, sliding_window, dilated_window, strided, fixed, global_tokens, random_blocks"
)
Q = "query = [[1.0, 0.0]]\nkeys = [[1.0, 0.0], [0.0, 1.0]]\n"  # lines 3 and 4 after mechanism and [inputs]
DOT = 'mechanism = "dot"\n[inputs]\n' + Q
CLAIM = DOT + '[[claim]]\nstep = "scores"\n'  # the claim's table is line 5

CASES = [
    # parse
    ("mechanism = 3\n[inputs]\n", f"e.toml, line 1: unknown mechanism 3; known: {KNOWN}"),
    ("[inputs]\nx = 1\n", f"e.toml: missing the field 'mechanism' (one of {KNOWN})"),
    (
        'title = "t"\nmechanism = "nope"\n[inputs]\n',
        f"e.toml, line 2: unknown mechanism 'nope'; known: {KNOWN}",
    ),
    ('mechanism = "dot"\n', "e.toml: missing the table [inputs]"),
    ('mechanism = "dot"\ninputs = 3\n', "e.toml: missing the table [inputs]"),
    (
        'mechanism = "dot"\nclaim = 3\n[inputs]\n',
        "e.toml: 'claim' must be an array of tables ([[claim]])",
    ),
    (
        'mechanism = "dot"\n[inputs\n',
        "e.toml: not valid TOML: Expected ']' at the end of a table declaration (at line 2, column 8)",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [1.0,\n',
        "e.toml: not valid TOML: Invalid value (at the end of the file, line 3)",
    ),
    # inputs
    (
        'mechanism = "dot"\n[inputs]\nquery = [1.0, 0.0]\n',
        "e.toml, line 2: [inputs]: mechanism 'dot' needs keys",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [1.0, 0.0]\nkeys = [1.0, 0.0]\n',
        "e.toml, line 4: [inputs] keys must be a matrix (one row per position); got shape (2,)",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [[[1.0]]]\nkeys = [[1.0]]\n',
        "e.toml, line 3: [inputs] query must be a vector or rows of queries; got shape (1, 1, 1)",
    ),
    (DOT + "values = [[1.0]]\n", "e.toml, line 5: [inputs] values: 1 values for 2 keys"),
    (
        DOT + "mask = [2, 0]\n",
        "e.toml, line 5: [inputs] mask: entries must be 1/0 or true/false; got 2",
    ),
    (
        DOT + "mask = [[1, 0], [1]]\n",
        "e.toml, line 5: [inputs] mask: rows must all have the same length (expected sequence of length 2 at dim 1 (got 1))",
    ),
    (
        DOT + "mask = [1, 0, 1]\n",
        "e.toml, line 5: [inputs] mask must be (1, 2) or (2,) (queries × keys); got shape (1, 3)",
    ),
    (
        DOT + "mask = [[1, 0], [1, 0], [0, 1]]\n",
        "e.toml, line 5: [inputs] mask must be (1, 2) or (2,) (queries × keys); got shape (3, 2)",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [[1.0, 0.0]]\nkeys = [[1.0, 0.0], [0.0]]\n',
        "e.toml, line 4: [inputs] keys: rows must all have the same length (expected sequence of length 2 at dim 1 (got 1))",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [[1.0, "a"]]\nkeys = [[1.0, 0.0]]\n',
        "e.toml, line 3: [inputs] query: expected numbers or nested lists of numbers; got 'a'",
    ),
    (
        'mechanism = "dot"\n[inputs]\nquery = [[1.0, true]]\nkeys = [[1.0, 0.0]]\n',
        "e.toml, line 3: [inputs] query: expected numbers or nested lists of numbers; got True",
    ),
    (
        'mechanism = "channel"\n[inputs]\nfeature_map = [[1.0]]\n[params]\nw1 = [[1.0]]\nw2 = [[1.0]]\n',
        "e.toml, line 3: [inputs] feature_map must be (C, H, W) or (b, C, H, W); got shape (1, 1)",
    ),
    (
        'mechanism = "target-attention"\n[inputs]\ncandidate = [[1.0]]\nhistory = [[1.0]]\n',
        "e.toml, line 3: [inputs] candidate must be a vector (d,); got shape (1, 1)",
    ),
    # parameters
    (
        'mechanism = "masked"\n[inputs]\n' + Q,
        "e.toml, line 2: [inputs]: mechanism 'masked' needs a mask (or [params] causal = true)",
    ),
    (
        'mechanism = "masked"\n[inputs]\n' + Q + '[params]\nscore = "cosine"\n',
        "e.toml, line 6: [params] score: unknown score 'cosine'; known: dot, scaled_dot, general, additive, concat",
    ),
    (
        'mechanism = "luong-general"\n[inputs]\n' + Q,
        "e.toml: [params]: mechanism 'luong-general' needs weight",
    ),
    (
        'mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0]]\n',
        "e.toml: [params]: mechanism 'multi-head' needs num_heads",
    ),
    (
        'mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = 0\n',
        "e.toml, line 5: [params] num_heads must be a positive integer; got 0",
    ),
    (
        'mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = true\n',
        "e.toml, line 5: [params] num_heads must be a positive integer; got True",
    ),
    (
        'mechanism = "multi-head"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = 1.0\n',
        "e.toml, line 5: [params] num_heads must be a positive integer; got Decimal('1.0')",
    ),
    (
        'mechanism = "gqa"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = 2\nnum_kv_heads = 3\n',
        "e.toml, line 6: [params] num_kv_heads: must divide num_heads=2; got 3",
    ),
    (
        'mechanism = "gqa"\n[inputs]\nx = [[1.0, 0.0]]\n[params]\nnum_heads = 2\n',
        "e.toml, line 4: [params]: mechanism 'gqa' needs num_kv_heads",
    ),
    (
        'mechanism = "softcap"\n[inputs]\n' + Q,
        "e.toml: [params]: mechanism 'softcap' needs cap (a positive number); got None",
    ),
    (
        'mechanism = "softcap"\n[inputs]\n' + Q + '[params]\ncap = "big"\n',
        "e.toml, line 5: [params]: mechanism 'softcap' needs cap (a positive number); got 'big'",
    ),
    (
        'mechanism = "softcap"\n[inputs]\n' + Q + "[params]\ncap = true\n",
        "e.toml, line 5: [params]: mechanism 'softcap' needs cap (a positive number); got True",
    ),
    (
        'mechanism = "differential"\n[inputs]\nquery_1 = [[1.0]]\nkeys_1 = [[1.0]]\nquery_2 = [[1.0]]\nkeys_2 = [[1.0]]\n'
        "values = [[1.0]]\n",
        "e.toml: [params]: mechanism 'differential' needs lambda (a number); got None",
    ),
    (
        'mechanism = "differential"\n[inputs]\nvalues = [[1.0]]\n[params]\nlambda = false\n',
        "e.toml, line 4: [params]: mechanism 'differential' needs lambda (a number); got False",
    ),
    (
        'mechanism = "mla"\n[inputs]\nquery = [[1.0, 0.0, 1.0]]\nquery_rope = [[1.0, 0.0]]\nlatents = [[1.0]]\n'
        "key_rope = [[1.0]]\n[params]\nnum_heads = 2\nw_uk = [[1.0]]\nw_uv = [[1.0]]\n",
        "e.toml, line 3: [inputs] query: 3 features do not split into num_heads=2",
    ),
    (
        'mechanism = "mla"\n[inputs]\nquery = [[1.0, 0.0]]\nquery_rope = [[1.0, 0.0, 1.0]]\nlatents = [[1.0]]\n'
        "key_rope = [[1.0]]\n[params]\nnum_heads = 2\nw_uk = [[1.0]]\nw_uv = [[1.0]]\n",
        "e.toml, line 4: [inputs] query_rope: 3 features do not split into num_heads=2",
    ),
    (
        'mechanism = "neighborhood-2d"\n[inputs]\n'
        + Q
        + "[params]\nheight = 2\nwidth = 2\nkernel = 3\n",
        "e.toml, line 2: [inputs]: a 2 × 2 grid needs 4 queries and keys; got 2 keys",
    ),
    (
        'mechanism = "neighborhood-2d"\n[inputs]\nquery = [[1.0]]\nkeys = [[1.0], [1.0]]\n[params]\nheight = 1\nwidth = 2\n'
        "kernel = 1\n",
        "e.toml, line 2: [inputs]: a 1 × 2 grid needs 2 queries and keys; got 2 keys",
    ),
    (
        'mechanism = "neighborhood-2d"\n[inputs]\nquery = [[1.0], [1.0]]\nkeys = [[1.0], [1.0]]\n[params]\nheight = 1\n'
        "width = 2\nkernel = 2\n",
        "e.toml, line 5: [params]: kernel must be odd (a window centred on the query); got 2",
    ),
    (
        'mechanism = "target-attention"\n[inputs]\ncandidate = [1.0]\nhistory = [[1.0]]\n[params]\nnormalise = "max"\n',
        "e.toml, line 6: [params] normalise must be one of softmax, none; got 'max'",
    ),
    (
        'mechanism = "sparse"\n[inputs]\n' + Q + '[params]\npattern = {name = "nope"}\n',
        f"e.toml, line 6: [params] pattern: no pattern 'nope'; known: {PATTERNS}",
    ),
    (
        'mechanism = "sparse"\n[inputs]\n' + Q + "[params]\npattern = 3\n",
        'e.toml, line 6: [params] pattern must be a table with a name, e.g. {name = "sliding_window", before = 1, '
        "after = 1}, or a list of {kind, args} tables",
    ),
    (
        'mechanism = "sparse"\n[inputs]\n'
        + Q
        + '[params]\npattern = {name = "sliding_window", before = -1, after = 1}\n',
        "e.toml, line 6: [params] pattern: before must be an integer >= 0; got -1",
    ),
    (
        'mechanism = "sparse"\n[inputs]\n'
        + Q
        + '[params]\npattern = [{kind = "nope", args = []}]\n',
        f"e.toml, line 6: [params] pattern: pattern kind must be one of {PATTERNS}; got 'nope'",
    ),
    # claims
    (
        DOT + '[[claim]]\nstep = "nope"\nvalue = 1\n',
        "e.toml, line 5: [[claim]] #1: unknown step 'nope'; this mechanism's steps: scores, weights, context",
    ),
    (DOT + "[[claim]]\nvalue = 1\n", "e.toml, line 5: [[claim]] #1: missing 'step'"),
    (
        CLAIM + 'value = [1, 0]\n[[claim]]\n\nstep = "scores"\n',
        "e.toml, line 8: [[claim]] #2: missing 'value'",
    ),
    (
        CLAIM + "index = [0]\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: index must be a list of 1-based integers, e.g. [2]; got [0]",
    ),
    (
        CLAIM + "index = 1\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: index must be a list of 1-based integers, e.g. [2]; got 1",
    ),
    (
        CLAIM + "index = [true]\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: index must be a list of 1-based integers, e.g. [2]; got [True]",
    ),
    (
        CLAIM + 'relation = "less"\nvalue = 1\n',
        "e.toml, line 5: [[claim]] #1: unknown relation 'less' (use 'equal' or 'argmax')",
    ),
    (
        CLAIM + 'relation = "argmax"\nvalue = 1\n',
        "e.toml, line 5: [[claim]] #1: an argmax claim needs one row; scores has shape (1, 2)",
    ),
    (
        CLAIM + 'relation = "argmax"\nindex = [1, 1]\nvalue = 1\n',
        "e.toml, line 5: [[claim]] #1: an argmax claim needs one row; scores[1, 1] has shape ()",
    ),
    (
        CLAIM + 'relation = "argmax"\nindex = [1]\nvalue = 3\n',
        "e.toml, line 5: [[claim]] #1: an argmax value is a 1-based position in 1..2; got 3",
    ),
    (
        CLAIM + 'relation = "argmax"\nindex = [1]\nvalue = 0\n',
        "e.toml, line 5: [[claim]] #1: an argmax value is a 1-based position in 1..2; got 0",
    ),
    (
        CLAIM + 'relation = "argmax"\nindex = [1]\nvalue = true\n',
        "e.toml, line 5: [[claim]] #1: an argmax value is a 1-based position in 1..2; got True",
    ),
    (
        CLAIM + 'value = "x"\n',
        "e.toml, line 5: [[claim]] #1: value must be a number or a list of numbers; got 'x'",
    ),
    (
        CLAIM + "value = [1, 2, 3]\n",
        "e.toml, line 5: [[claim]] #1: scores has 2 number(s) (shape (1, 2)); the claim writes 3",
    ),
    (
        CLAIM + "index = [1, 2]\nvalue = [1, 2]\n",
        "e.toml, line 5: [[claim]] #1: scores[1, 2] has 1 number(s) (shape ()); the claim writes 2",
    ),
    (
        CLAIM + "index = [1, 3]\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: claim on scores: index [1, 3] is out of range for shape (1, 2) (at position 2)",
    ),
    (
        CLAIM + "index = [2]\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: claim on scores: index [2] is out of range for shape (1, 2) (at position 1)",
    ),
    (
        CLAIM + "index = [1, 1, 1]\nvalue = 1\n",
        "e.toml, line 5: [[claim]] #1: claim on scores: index [1, 1, 1] is out of range for shape (1, 2) (at position 3)",
    ),
]


@pytest.mark.parametrize(("text", "message"), CASES)
def test_each_malformed_example_is_refused_with_its_exact_message(text, message):
    with pytest.raises(ExampleError) as err:
        ex = parse(text, "e.toml")
        verify(ex, run(ex))
    assert str(err.value) == message


def test_a_missing_file_and_an_unknown_builtin_name():
    with pytest.raises(ExampleError, match=r"^no such file: nope\.toml$"):
        load("nope.toml")
    with pytest.raises(ExampleError) as err:
        load("nope-example")
    assert re.fullmatch(
        r"no built-in example 'nope-example'; available: attnlab-attentional, .*, tutorial2-self-attention",
        str(err.value),
    )


def test_the_place_of_a_field_counts_lines_from_one_inside_its_own_table():
    ex = parse(
        '# a comment\nmechanism = "dot"\n\n[inputs]\nquery = [1.0, 0.0]\n  keys = [[1.0, 0.0]]\n'
        '[params]\nkeys = 1\n[[claim]]\nstep = "scores"\nvalue = 1\n[[claim]]\nstep = "weights"\nvalue = 1\n',
        "p.toml",
    )
    assert ex.line("", "mechanism") == 2
    assert (
        ex.line("inputs") == 4 and ex.line("inputs", "keys") == 6 and ex.line("params", "keys") == 8
    )
    assert (
        ex.line("inputs", "values") is None
        and ex.line("claim", nth=0) == 9
        and ex.line("claim", nth=1) == 12
    )
    assert ex.line("claim", nth=2) is None and ex.line("claim", "step", nth=1) == 13
    assert ex.at("inputs", "keys") == "p.toml, line 6: [inputs] keys"
    assert ex.at("inputs") == "p.toml, line 4: [inputs]"
    assert ex.at("claim", nth=1) == "p.toml, line 12: [[claim]] #2"
    assert ex.at("params", "scale") == "p.toml: [params] scale"  # no such line: the file alone


def test_a_one_row_mask_applies_to_every_query():
    for mask in ("[1, 0]", "[[1, 0]]"):
        ex = parse(
            'mechanism = "dot"\n[inputs]\nquery = [[1.0, 0.0], [0.0, 1.0]]\nkeys = [[1.0, 0.0], [0.0, 1.0]]\n'
            f"mask = {mask}\n",
            "m.toml",
        )
        assert run(ex)["weights"].value.tolist() == [
            [1.0, 0.0],
            [1.0, 0.0],
        ]  # only the first key may be attended
