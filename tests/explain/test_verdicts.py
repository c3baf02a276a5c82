"""Verdicts that say what a wrong claim meant: other conventions, another step, and consequential errors.

Every example is built here with values computed by hand (or in float64 NumPy in the test).
"""

from __future__ import annotations

import numpy as np

from attnlab.cli import main
from attnlab.explain import parse, render, run, verify
from attnlab.explain.render_text import render_claims
from attnlab.explain.verify import CONVENTION, EXACT, OTHER_STEP, WRONG


def _claims(*claims: tuple[str, str, str]) -> str:
    """[[claim]] tables from (step, index or "", value)."""
    out = []
    for step, index, value in claims:
        out.append(f'[[claim]]\nstep = "{step}"\n' + (f"index = {index}\n" if index else "") + f"value = {value}\n")
    return "\n".join(out)


# scores = qᵀk = [8.4853, 2.1213, -2.1213] (query [1, 0] picks the keys' first column)
DOT = 'mechanism = "dot"\n[inputs]\nquery = [1.0, 0.0]\nkeys = [[8.4853, 0.0], [2.1213, 0.0], [-2.1213, 0.0]]\n'


def test_truncated_and_rounded_up_or_down_are_conventions():
    v = verify(parse(DOT + _claims(
        ("scores", "[1]", "8.48"),    # 8.4853 cut at two decimals (rounded: 8.49)
        ("scores", "[1]", "8.49"),    # rounded: exact
        ("scores", "[2]", "2.13"),    # 2.1213 rounded up (rounded: 2.12)
        ("scores", "[3]", "-2.13"),   # -2.1213 rounded down (rounded: -2.12)
        ("scores", "[3]", "-2.2"),    # one decimal: a cut that far is not trusted
    ), "t.toml"))
    assert [(x.status, x.rule) for x in v] == [
        (CONVENTION, "truncated"), (EXACT, ""), (CONVENTION, "rounded up"), (CONVENTION, "rounded down"), (WRONG, ""),
    ]
    assert all(x.ok for x in v[:4]) and not v[4].ok


def test_zero_based_index_is_a_convention():
    v = verify(parse(DOT + _claims(("scores", "[1]", "2.12")), "t.toml"))  # scores[2] = 2.1213 under index [1]
    assert (v[0].status, v[0].rule) == (CONVENTION, "0-based index")


def test_percentages_are_a_convention():
    text = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0], [0.0]]\n' + _claims(("weights", "", "[73.1, 26.9]"))
    e = np.e / (np.e + 1)  # softmax([1, 0]) = [0.7311, 0.2689]
    assert round(100 * e, 1) == 73.1
    (v,) = verify(parse(text, "t.toml"))
    assert (v.status, v.rule) == (CONVENTION, "percent")


def test_transposed_matrix_is_a_convention():
    # scores = Q Kᵀ = [[1, 3, 5], [2, 4, 6]]; written as the 3 × 2 transpose
    text = ('mechanism = "dot"\n[inputs]\nquery = [[1.0, 0.0], [0.0, 1.0]]\nkeys = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]\n'
            + _claims(("scores", "", "[[1, 2], [3, 4], [5, 6]]"), ("scores", "", "[[1, 3, 5], [2, 4, 6]]")))
    v = verify(parse(text, "t.toml"))
    assert (v[0].status, v[0].rule) == (CONVENTION, "transposed")
    assert v[1].status == EXACT
    # two keys: scores = [[1, 3], [2, 4], [3, 7]] (3 queries × 2 keys), written as its 2 × 3 transpose
    text = ('mechanism = "dot"\n[inputs]\nquery = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]\nkeys = [[1.0, 2.0], [3.0, 4.0]]\n'
            + _claims(("scores", "", "[[1, 2, 3], [3, 4, 7]]")))
    (v,) = verify(parse(text, "t.toml"))
    assert (v.status, v.rule) == (CONVENTION, "transposed")


SCALED = 'mechanism = "scaled_dot"\n[inputs]\nquery = [1.0, 1.0]\nkeys = [[1.0, 2.0], [4.0, 0.0]]\n'


def test_raw_scores_written_as_scaled_scores_is_another_step(capsys):
    # scores qᵀk = [3, 4]; scaled by 1/√2: [2.1213, 2.8284]
    text = SCALED + _claims(("scaled_scores", "", "[3.0, 4.0]"), ("scaled_scores", "[2]", "2.83"))
    v = verify(parse(text, "t.toml"))
    assert (v[0].status, v[0].rule) == (OTHER_STEP, "scores") and not v[0].ok
    assert v[1].status == EXACT and abs(4 / np.sqrt(2) - 2.8284) < 5e-5
    out = render(parse(text, "t.toml"), run(parse(text, "t.toml")), v)
    assert "matches the raw scores qᵀk (before ÷√d)" in out
    assert "1 from another step" in out
    zh = render(parse(text, "t.toml"), run(parse(text, "t.toml")), v, lang="zh")
    assert "与未缩放的得分 qᵀk 相符" in zh


def test_cli_exit_code_counts_another_step_not_a_convention(tmp_path, capsys):
    conv, other = tmp_path / "conv.toml", tmp_path / "other.toml"
    conv.write_text(DOT + _claims(("scores", "[1]", "8.48")), encoding="utf-8")
    other.write_text(SCALED + _claims(("scaled_scores", "", "[3.0, 4.0]")), encoding="utf-8")
    assert main(["verify", str(conv)]) == 0
    assert "truncated" in capsys.readouterr().out
    assert main(["verify", str(other)]) == 1


# scores = [1, 3, 2]; weights = softmax = [0.0900, 0.6652, 0.2447]
ARGMAX = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0], [3.0], [2.0]]\n'


def _softmax(e):
    e = np.asarray(e, dtype=float)
    return np.exp(e - e.max()) / np.exp(e - e.max()).sum()


def test_argmax_not_after_a_wrong_value_that_cannot_move_it():
    text = ARGMAX + _claims(("scores", "[1]", "1.5")) + '\n[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 3\n'
    assert int(np.argmax(_softmax([1.5, 3, 2]))) + 1 == 2  # the wrong 1.5 leaves the argmax at 2
    v = verify(parse(text, "t.toml"))
    assert v[0].status == WRONG
    assert v[1].status == WRONG and v[1].true == 2
    assert v[1].upstream == "" and v[1].follows_from == ""
    assert "after the wrong" not in render(parse(text, "t.toml"), run(parse(text, "t.toml")), v)


def test_argmax_after_a_wrong_value_that_moves_it():
    text = ARGMAX + _claims(("scores", "[1]", "5.0")) + '\n[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 1\n'
    assert int(np.argmax(_softmax([5, 3, 2]))) + 1 == 1
    v = verify(parse(text, "t.toml"))
    assert v[1].status == WRONG and v[1].upstream == "scores[1]" and v[1].follows_from == "scores[1]"


def test_a_wrong_value_invisible_at_the_later_precision_is_not_upstream():
    w = _softmax([1, 3, 2])
    moved = _softmax([1, 3, 2.004])
    assert np.array_equal(np.round(w, 1), np.round(moved, 1))  # the wrong 2.004 does not show at one decimal
    assert np.round(w, 1).tolist() == [0.1, 0.7, 0.2]
    text = ARGMAX + _claims(("scores", "[3]", "2.004"), ("weights", "", "[0.1, 0.6, 0.2]"))
    v = verify(parse(text, "t.toml"))
    assert v[0].status == WRONG and v[1].status == WRONG
    assert v[1].upstream == ""
    # the same weights claim after a wrong score that does move it: consequential
    text = ARGMAX + _claims(("scores", "[3]", "2.5"), ("weights", "", "[0.1, 0.6, 0.3]"))
    assert np.round(_softmax([1, 3, 2.5]), 1).tolist() == [0.1, 0.6, 0.3]
    v = verify(parse(text, "t.toml"))
    assert v[1].status == WRONG and v[1].upstream == "scores[3]" and v[1].follows_from == "scores[3]"


def test_argmax_claims_print_the_true_position_and_its_value_in_english_by_default():
    # scores = qᵀk = [0, -1, -2]: the largest is 0, at position 1; weights = softmax(scores), largest at 1 too
    text = ('mechanism = "dot"\n[inputs]\nquery = [1.0, 0.0]\nkeys = [[0.0, 0.0], [-1.0, 0.0], [-2.0, 0.0]]\n'
            '[[claim]]\nstep = "scores"\nrelation = "argmax"\nvalue = 1\n'
            '\n[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 2\n')
    verdicts = verify(parse(text, "a.toml"))
    top = _softmax([0.0, -1.0, -2.0]).max()
    assert f"{top:.4f}" == "0.6652"
    lines = render_claims(verdicts, 4)
    assert lines == render_claims(verdicts, 4, "en")
    assert lines[1] == "Claims written in the example, checked against attnlab:"
    assert lines[2].endswith("true: position 1 (0.0000)") and "✓" in lines[2]
    assert lines[3].endswith("true: position 1 (0.6652)") and "✗" in lines[3]
    zh = render_claims(verdicts, 4, "zh")
    assert zh[2].endswith("真值：第 1 位（0.0000）") and zh[3].endswith("真值：第 1 位（0.6652）")


def test_a_long_matrix_shows_its_first_and_last_rows_and_its_size():
    import torch

    from attnlab.explain.render_text import fmt_array

    text = fmt_array(torch.arange(40 * 3, dtype=torch.float64).reshape(40, 3), digits=1)
    lines = text.splitlines()
    assert len(lines) == 6 + 1 + 2 + 1  # the first 6 rows, an ellipsis row, the last 2, the size
    assert lines[0] == "  │   0.0    1.0    2.0 │" and lines[6] == "  │     ⋮      ⋮      ⋮ │"
    assert lines[8] == "  │ 117.0  118.0  119.0 │" and lines[9] == "    (40 × 3)"
    assert fmt_array(torch.zeros(16, 2)).splitlines()[-1].endswith("│")  # 16 rows: not long, no size line
