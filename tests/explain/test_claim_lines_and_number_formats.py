"""The words of each verdict (text and Markdown, English and Chinese), the summary line, and the number
and array formats the walkthroughs print: every phrase of ``attnlab.explain.i18n`` that reaches a
walkthrough, each written out here as the reader sees it."""

from __future__ import annotations

from decimal import Decimal

import pytest
import torch

from attnlab.explain import i18n, parse, render_markdown, run, verify
from attnlab.explain.render_markdown import latex_array
from attnlab.explain.render_text import (
    claim_lines,
    fmt_array,
    fmt_number,
    is_array,
    plain,
    render_claims,
    scalar_text,
    summary,
)
from attnlab.explain.verify import CONVENTION, DRIFT, EXACT, OTHER_STEP, WRONG, Verdict


def _v(status, rule="", **kw):
    kw.setdefault("claimed", Decimal("0.50"))
    kw.setdefault("true", 0.25)
    return Verdict(
        0,
        kw.pop("step", "weights"),
        kw.pop("index", (1,)),
        kw.pop("relation", "equal"),
        status=status,
        rule=rule,
        **kw,
    )


DRIFTS = {
    "own values": (
        "rounding drift (from the example's own rounded values)",
        "舍入误差（由例子自己的舍入值算出）",
    ),
    "working precision": (
        "rounding drift (intermediates written to the example's precision)",
        "舍入误差（中间结果按例子的精度书写）",
    ),
    "double rounding": ("rounding drift (rounded twice)", "舍入误差（两次舍入）"),
}
CONVENTIONS = {
    "truncated": (
        "another convention: truncated at the written precision (not rounded)",
        "另一种约定：按书写精度截断（而非四舍五入）",
    ),
    "rounded up": (
        "another convention: rounded up at the written precision",
        "另一种约定：按书写精度向上取整",
    ),
    "rounded down": (
        "another convention: rounded down at the written precision",
        "另一种约定：按书写精度向下取整",
    ),
    "percent": (
        "another convention: written as percentages (× 100)",
        "另一种约定：写成百分数（× 100）",
    ),
    "0-based index": (
        "another convention: the index counted from 0 (it is the next entry's value)",
        "另一种约定：下标从 0 数起（这是下一项的值）",
    ),
    "transposed": (
        "another convention: the matrix written transposed",
        "另一种约定：矩阵写成了转置",
    ),
}
OTHER_STEPS = {
    ("scaled_scores", "scores"): (
        "matches the raw scores qᵀk (before ÷√d)",
        "与未缩放的得分 qᵀk 相符（除以 √d 之前）",
    ),
    ("scores", "scaled_scores"): (
        "matches the scaled scores qᵀk/√d (after ÷√d)",
        "与缩放后的得分 qᵀk/√d 相符（除以 √d 之后）",
    ),
    ("weights", "scores"): ("matches the scores before softmax", "与 softmax 之前的得分相符"),
    ("weights", "scaled_scores"): (
        "matches the scaled scores before softmax",
        "与 softmax 之前的缩放得分相符",
    ),
}


@pytest.mark.parametrize("rule", DRIFTS)
def test_each_drift_rule_in_both_languages(rule):
    for lang, note in zip(("en", "zh"), DRIFTS[rule]):
        assert claim_lines(_v(DRIFT, rule), 4, lang)[2] == [note]


@pytest.mark.parametrize("rule", CONVENTIONS)
def test_each_convention_in_both_languages(rule):
    for lang, note in zip(("en", "zh"), CONVENTIONS[rule]):
        assert claim_lines(_v(CONVENTION, rule), 4, lang)[2] == [note]


@pytest.mark.parametrize("pair", OTHER_STEPS)
def test_each_named_other_step_in_both_languages(pair):
    step, other = pair
    for lang, note in zip(("en", "zh"), OTHER_STEPS[pair]):
        assert claim_lines(_v(OTHER_STEP, other, step=step), 4, lang)[2] == [note]


def test_any_other_step_is_named_with_its_label_and_formula():
    v = _v(OTHER_STEP, "context", step="weights", extra={"formula": "c_i = Σ_j α_ij v_j"})
    assert claim_lines(v, 4, "en")[2] == [
        "matches another step: context (context vector), c_i = Σ_j α_ij v_j"
    ]
    assert claim_lines(v, 4, "zh")[2] == ["与另一步相符：context（上下文向量），c_i = Σ_j α_ij v_j"]
    assert claim_lines(_v(OTHER_STEP, "context"), 4, "en")[2] == [
        "matches another step: context (context vector), "
    ]


def test_the_claim_and_the_true_value_in_both_languages():
    v = _v(EXACT, claimed=Decimal("0.50"), true=[0.25, -0.0], index=(2, 1))
    assert claim_lines(v, 4, "en")[:2] == ("weights[2, 1] = 0.50", "true: [0.2500  0.0000]")
    assert claim_lines(v, 2, "zh")[:2] == ("weights[2, 1] = 0.50", "真值：[0.25  0.00]")
    a = _v(EXACT, relation="argmax", claimed=2, true=2, true_max=0.6, index=())
    assert claim_lines(a, 3, "en") == (
        "largest entry of weights at position 2",
        "true: position 2 (0.600)",
        [],
    )
    assert claim_lines(a, 3, "zh") == ("weights 的最大值在第 2 位", "真值：第 2 位（0.600）", [])
    a.true_max = None  # no largest value known: 0
    assert claim_lines(a, 1, "en")[1] == "true: position 2 (0.0)"


def test_a_wrong_claim_names_what_it_follows_from_or_comes_after_and_the_examples_own_value():
    follows = _v(WRONG, follows_from="scores[1]", upstream="scores[1]", own=0.5, true=0.25)
    assert claim_lines(follows, 4, "en")[2] == ["right arithmetic from the wrong scores[1]"]
    assert claim_lines(follows, 4, "zh")[2] == ["计算本身正确，但出自错误的 scores[1]"]
    after = _v(WRONG, upstream="scores[2]", own=[5.0, 5.0], true=[7.0, 3.0])
    assert claim_lines(after, 1, "en")[2] == [
        "after the wrong scores[2]",
        "the example's own earlier values give [5.0  5.0]",
    ]
    assert claim_lines(after, 1, "zh")[2] == [
        "在错误的 scores[2] 之后",
        "按例子自己前面的数值算得 [5.0  5.0]",
    ]
    same = _v(
        WRONG, own=0.25, true=0.25
    )  # the example's own values give the true value: nothing to add
    assert claim_lines(same, 4, "en")[2] == []
    none = _v(WRONG, own=None)
    assert claim_lines(none, 4, "en")[2] == []
    argmax = _v(WRONG, relation="argmax", claimed=1, true=2, own=3, true_max=0.5)
    assert claim_lines(argmax, 4, "en")[2] == [
        "the example's own earlier values give 3"
    ]  # a position, as is


def test_the_summary_counts_each_status_and_names_the_optional_ones_only_when_present():
    vs = [
        _v(EXACT),
        _v(EXACT),
        _v(DRIFT, "own values"),
        _v(CONVENTION, "percent"),
        _v(OTHER_STEP, "scores"),
        _v(OTHER_STEP, "scores"),
        _v(WRONG),
    ]
    assert (
        summary(vs, "en")
        == "7 claims: 2 exact, 1 rounding drift, 1 in another convention, 2 from another step, 1 wrong."
    )
    assert (
        summary(vs, "zh")
        == "共 7 个数值：2 个正确，1 个舍入误差，1 个另一约定，2 个另一步的值，1 个错误。"
    )
    assert summary(vs[:3], "en") == "3 claims: 2 exact, 1 rounding drift, 0 wrong."
    assert summary([], "zh") == "共 0 个数值：0 个正确，0 个舍入误差，0 个错误。"


def test_the_summary_of_one_claim_says_claim():
    assert summary([_v(EXACT)], "en") == "1 claim: 1 exact, 0 rounding drift, 0 wrong."
    assert summary([_v(WRONG)], "zh") == "共 1 个数值：0 个正确，0 个舍入误差，1 个错误。"
    assert summary([], "en") == "0 claims: 0 exact, 0 rounding drift, 0 wrong."


def test_the_claims_block_aligns_its_columns_and_pads_chinese_by_width():
    vs = [
        _v(EXACT, claimed=Decimal("0.2"), true=0.25),
        _v(OTHER_STEP, "scores", step="weights", true=0.25),
    ]
    en = render_claims(vs, 2, "en")
    assert en == [
        "",
        "Claims written in the example, checked against attnlab:",
        "  ✓ exact      weights[1] = 0.2                     true: 0.25",
        "  ✗ other step weights[1] = 0.50                    true: 0.25",
        "           matches the scores before softmax",
        "  2 claims: 1 exact, 0 rounding drift, 1 from another step, 0 wrong.",
    ]
    zh = render_claims(vs, 2, "zh")
    assert (
        zh[2] == "  ✓ 正确     weights[1] = 0.2                     真值：0.25"
    )  # "舍入误差" is 8 columns wide
    assert zh[3] == "  ✗ 另一步   weights[1] = 0.50                    真值：0.25"
    assert render_claims([_v(EXACT)], 4, "en")[2].startswith(
        "  ✓ exact  weights[1] = 0.50 "
    )  # at least 6 wide
    wrong = render_claims([_v(WRONG, true=0.25)], 4, "en")
    assert wrong[2].startswith("  ✗ WRONG  weights[1]")


def test_the_markdown_table_escapes_pipes_in_its_cells():
    text = """mechanism = "dot"
[inputs]
query = [1.0, 0.0]
keys = [[1.0, 0.0], [0.0, 1.0]]
[[claim]]
step = "weights"
value = [1.0, 0.0]
"""
    ex = parse(text, "w.toml")
    t = run(ex)
    vs = verify(ex, t)
    assert (
        vs[0].status == OTHER_STEP and vs[0].rule == "scores"
    )  # softmax([1, 0]) written as the scores
    vs[0].claimed = "a|b"
    md = render_markdown(ex, t, vs)
    assert (
        "| ✗ other step | weights = 'a\\|b' | true: [0.7311  0.2689] | matches the scores before softmax |\n"
        in md
    )
    assert md.endswith("\n\n1 claim: 0 exact, 0 rounding drift, 1 from another step, 0 wrong.\n")


def test_numbers_print_with_their_digits_without_a_minus_zero():
    assert (
        fmt_number(0.731059, 4) == "0.7311"
        and fmt_number(2.0, 0) == "2"
        and fmt_number(-1.5, 1) == "-1.5"
    )
    assert (
        fmt_number(-0.00001, 4) == "0.0000"
        and fmt_number(-0.2, 0) == "0"
        and fmt_number(-0.0, 2) == "0.00"
    )
    assert fmt_number(float("nan"), 3) == "nan"
    assert fmt_number(float("inf"), 3) == "inf" and fmt_number(float("-inf"), 3) == "-inf"


def test_arrays_print_as_a_number_a_row_a_boxed_matrix_or_labelled_slices():
    assert fmt_array(torch.tensor(1.25, dtype=torch.float64), 2) == "  1.25"
    assert fmt_array(torch.tensor([1.0, -2.5]), 1, indent="") == "[1.0  -2.5]"
    assert (
        fmt_array(torch.tensor([[1.0, -20.0], [3.0, 4.0]]), 1)
        == "  │   1.0  -20.0 │\n  │   3.0    4.0 │"
    )
    assert (
        fmt_array(torch.zeros(2, 1, 1), 0, slice_label=lambda i: f"<{i}>")
        == "  <1>\n    │ 0 │\n  <2>\n    │ 0 │"
    )
    assert fmt_array(torch.zeros(1, 1, 1), 0) == "  [1]\n    │ 0 │"


def test_a_long_row_shows_its_first_six_and_last_two_entries_and_its_length():
    row = torch.arange(17, dtype=torch.float64)
    assert fmt_array(row, 0) == "  [0  1  2  3  4  5  …  15  16]  (17 numbers)"
    sixteen = torch.arange(16, dtype=torch.float64)
    assert fmt_array(sixteen, 0) == "  [" + "  ".join(str(i) for i in range(16)) + "]"


def test_a_wide_matrix_elides_its_middle_columns_and_says_its_size():
    m = torch.arange(2 * 17, dtype=torch.float64).reshape(2, 17)
    lines = fmt_array(m, 0).splitlines()
    assert lines[0] == "  │  0   1   2   3   4   5   …  15  16 │"
    assert lines[1] == "  │ 17  18  19  20  21  22   …  32  33 │"
    assert lines[2] == "    (2 × 17)"
    tall = fmt_array(torch.zeros(17, 1), 0).splitlines()
    assert tall[6] == "  │ ⋮ │" and tall[-1] == "    (17 × 1)" and len(tall) == 6 + 1 + 2 + 1


def test_latex_arrays():
    assert latex_array(torch.tensor(0.5), 2) == "0.50"
    assert latex_array(torch.tensor([1.0, float("-inf"), float("inf")]), 1) == (
        r"\begin{bmatrix} 1.0 & -\infty & \infty \end{bmatrix}"
    )
    assert (
        latex_array(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), 0)
        == r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}"
    )


def test_claimed_values_and_parameters_print_as_written():
    assert (
        plain(Decimal("0.50")) == "0.50"
        and plain(3) == "3"
        and plain(0.5) == "0.5"
        and plain("x") == "'x'"
    )
    assert plain([Decimal("1.0"), [2, Decimal("3.10")]]) == "[1.0, [2, 3.10]]"
    assert (
        scalar_text(True) == "true"
        and scalar_text(False) == "false"
        and scalar_text(Decimal("0.50")) == "0.50"
    )
    assert scalar_text(7) == "7" and scalar_text("softmax") == "softmax"
    assert scalar_text({"name": "窗口", "before": 1}) == '{"name": "窗口", "before": 1}'
    assert (
        scalar_text([{"kind": "local", "args": [Decimal("1.5")]}])
        == '[{"kind": "local", "args": ["1.5"]}]'
    )
    assert is_array(Decimal("1")) and is_array([[1, 2.0]]) and is_array(3)
    assert (
        not is_array([])
        and not is_array(True)
        and not is_array([1, "a"])
        and not is_array({"a": 1})
    )


def test_step_labels_and_notes_in_both_languages():
    assert (
        i18n.label("en", "scores_2") == "scores, map 2"
        and i18n.label("zh", "scores_2") == "第 2 张图的得分"
    )
    assert i18n.label("en", "weights_1") == "attention weights, map 1"
    assert i18n.label("zh", "masked_scores_1") == "第 1 张图的掩码得分"
    assert i18n.label("zh", "scaled_scores_2") == "第 2 张图的缩放得分"
    assert (
        i18n.label("en", "some_new_step") == "some new step"
        and i18n.label("zh", "some_new_step") == "some new step"
    )
    assert i18n.note("zh", "3 of 12 scores masked") == "12 个得分中 3 个被遮住"
    assert i18n.note("en", "3 of 12 scores masked") == "3 of 12 scores masked"
    assert (
        i18n.note("zh", "x 3 of 12 scores masked") == "x 3 of 12 scores masked"
    )  # anchored: other notes stay
    assert i18n.note("zh", "3 of 12 scores masked here") == "3 of 12 scores masked here"
    assert i18n.t("en", "verify_file", name="a.toml", summary="s") == "a.toml: s"
    assert i18n.t("zh", "verify_file", name="a.toml", summary="s") == "a.toml：s"
    assert (i18n.t("en", "no_claims"), i18n.t("zh", "no_claims")) == (
        "(no claims written)",
        "（没有写下的数值）",
    )
    assert (i18n.t("en", "slice", i=2), i18n.t("zh", "head", i=3)) == ("[2]", "头 3")
    assert i18n.has("zh", "other:weights<scores") and not i18n.has("en", "other:weights<context")


def test_an_unknown_language_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown language 'fr'; choose one of en, zh$"):
        i18n.t("fr", "claims")
    with pytest.raises(ValueError, match="unknown language 'de'"):
        i18n.label("de", "scores")
    with pytest.raises(ValueError, match="unknown language 'EN'"):
        i18n.has("EN", "claims")
    assert i18n.check_lang("zh") == "zh"
