"""The checker's rules one by one: written precision, ties, cut-off modes, "changes", and malformed claims.

Every expected value is worked out by hand in the comments (decimal arithmetic on the
written numbers, or a softmax of two or three numbers); none is read off the checker.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
import torch

from attnlab.explain import parse, run, verify
from attnlab.explain.examples import ExampleError
from attnlab.explain.verify import (
    DRIFT,
    EXACT,
    OTHER_STEP,
    WRONG,
    _round,
    agrees,
    all_ok,
    changes,
    cut,
    decimals,
    select,
)


def D(s: str) -> Decimal:
    return Decimal(s)


def T(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def test_decimals_counts_the_written_places():
    assert decimals(D("0.57")) == 2
    assert decimals(D("0.10")) == 2
    assert decimals(D("2")) == 0
    assert decimals(D("1E+2")) == 0  # 100: no decimal places (exponent +2)
    assert decimals(D("Infinity")) == 0  # no numeric exponent
    assert decimals(2) == 0 and decimals(0.5) == 1  # an int as written; a float built in code: its repr's places


def test_a_tie_agrees_either_way_and_nothing_agrees_with_a_non_finite_value():
    # |1 − 0.5| = |0 − 0.5| = ½·10⁰ exactly; |0.2 − 0.25| = ½·10⁻¹
    assert agrees("equal", [1, 0, D("0.2"), D("0.3")], T(0.5, 0.5, 0.25, 0.25))
    assert not agrees("equal", [D("0.2")], T(0.2501))
    assert not agrees("equal", [D("1")], T(float("inf")))
    assert not agrees("equal", [D("1")], T(float("nan")))


def test_double_rounding_rounds_half_up_twice():
    # 0.5645 → (3 decimals, half up) 0.565 → (2 decimals, half up) 0.57; one rounding gives 0.56.
    # Half-even at the first step would give 0.564 → 0.56.
    assert not agrees("equal", [D("0.57")], T(0.5645))
    assert agrees("equal", [D("0.57")], T(0.5645), double=True)
    # 0.5649 → 0.565 → 0.57 (the tie is at the second rounding)
    assert agrees("equal", [D("0.57")], T(0.5649), double=True)
    assert not agrees("equal", [D("0.58")], T(0.5649), double=True)


def test_cut_modes_at_the_written_precision():
    x = T(8.4853)
    assert cut("truncated", [D("8.48")], x) and not cut("rounded up", [D("8.48")], x)
    assert cut("rounded up", [D("8.49")], x)  # also plain rounding
    assert cut("rounded down", [D("-2.13")], T(-2.1213)) and not cut("truncated", [D("-2.13")], T(-2.1213))
    # a number that rounds right needs no mode, even at one decimal
    assert cut("truncated", [D("0.3")], T(0.3))
    # a cut needs at least two decimals: 0.5645 truncated at one decimal (0.5) is not trusted
    assert not cut("truncated", [D("0.5")], T(0.5645))
    # truncating 0.5645 gives 0.56, not the double-rounded 0.57
    assert not cut("truncated", [D("0.57")], T(0.5645))
    # every number must be accounted for: one claimed number for two values is not a cut
    assert not cut("truncated", [D("8.48")], T(8.4853, 1.0))
    assert not cut("truncated", [D("8.48")], T(float("inf")))


def test_changes_at_the_written_precision():
    # 0.125 rounds half up to 0.13 at two decimals: no visible change from 0.13, either way round
    assert not changes("equal", [D("0.13")], T(0.125), T(0.13))
    assert not changes("equal", [D("0.13")], T(0.13), T(0.125))
    assert changes("equal", [D("0.13")], T(0.125), T(0.135))  # 0.13 → 0.14
    assert not changes("equal", [D("1.0")], T(1.0), T(1.04))  # both 1.0 at one decimal
    assert not changes("equal", [D("1.0"), D("1.0")], T(1.0, 2.0), T(1.0, 2.0))
    # non-finite values: the same non-finite value is no change, anything else is
    nan, inf = float("nan"), float("inf")
    assert not changes("equal", [D("1.0")], T(nan), T(nan))
    assert not changes("equal", [D("1.0")], T(inf), T(inf))
    assert changes("equal", [D("1.0")], T(inf), T(1.0))
    assert changes("equal", [D("1.0")], T(1.0), T(inf))
    assert changes("equal", [D("1.0")], T(nan), T(1.0))
    assert changes("equal", [D("1.0")], T(1.0), T(nan))
    assert changes("equal", [D("1.0"), D("1.0")], T(nan, 1.0), T(nan, 2.0))  # the second number moves


def test_changes_of_an_argmax_is_its_position_only():
    assert not changes("argmax", 2, T(1.0, 2.0), T(1.6, 2.0))  # position 2 both times (1 → 2 at 0 decimals)
    assert changes("argmax", 2, T(1.0, 2.0), T(3.0, 2.0))


def test_round_is_half_up():
    # 0.125 and 0.375 are exact in binary: half up gives 0.13 and 0.38 (half-even: 0.12, 0.38)
    assert _round(T(0.125, 0.375, -0.125, 2.0), 2).tolist() == [0.13, 0.38, -0.12, 2.0]
    assert _round(T(float("inf")), 2).tolist() == [float("inf")]


DOT3 = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0], [3.0], [2.0]]\n'  # scores [1, 3, 2]
MAT = 'mechanism = "dot"\n[inputs]\nquery = [[1.0, 0.0], [0.0, 1.0]]\nkeys = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]\n'


def test_select_names_the_file_and_the_offending_position():
    ex = parse(MAT, "m.toml")
    scores = run(ex)["scores"].value  # [[1, 3, 5], [2, 4, 6]]
    assert select(ex, "scores", scores, [2, 3]).item() == 6.0
    with pytest.raises(ExampleError, match=r"^m\.toml: claim on scores: index \[1, 4\] is out of range for shape \(2, 3\) "
                                            r"\(at position 2\)"):
        select(ex, "scores", scores, [1, 4])
    with pytest.raises(ExampleError, match=r"\(at position 1\)"):
        select(ex, "scores", scores, [3, 1])


@pytest.mark.parametrize(
    ("claim", "words"),
    [
        ('claim = [1]\n', ["each [[claim]] must be a table"]),
        ('[[claim]]\nvalue = 1\n', ["missing 'step'"]),
        ('[[claim]]\nstep = "scores"\n', ["missing 'value'"]),
        ('[[claim]]\nstep = "tanh"\nvalue = 1\n', ["unknown step 'tanh'", "this mechanism's steps: scores, weights, context"]),
        ('[[claim]]\nstep = "scores"\nindex = 2\nvalue = 1\n', ["index must be a list of 1-based integers, e.g. [2]; got 2"]),
        ('[[claim]]\nstep = "scores"\nindex = [0]\nvalue = 1\n', ["index must be a list", "got [0]"]),
        ('[[claim]]\nstep = "scores"\nindex = [true]\nvalue = 1\n', ["index must be a list", "got [True]"]),
        ('[[claim]]\nstep = "scores"\nrelation = "max"\nvalue = 1\n', ["unknown relation 'max' (use 'equal' or 'argmax')"]),
        ('[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 4\n', ["an argmax value is a 1-based position in 1..3; got 4"]),
        ('[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 0\n', ["1..3; got 0"]),
        ('[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = true\n', ["1..3; got True"]),
        ('[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 1.0\n', ["1..3; got Decimal('1.0')"]),
        ('[[claim]]\nstep = "scores"\nvalue = "abc"\n', ["value must be a number or a list of numbers; got 'abc'"]),
        ('[[claim]]\nstep = "scores"\nvalue = [1, 2]\n', ["scores has 3 number(s) (shape (3,)); the claim writes 2"]),
    ],
)
def test_malformed_claims_say_what_is_wrong(claim, words):
    with pytest.raises(ExampleError) as e:
        verify(parse(claim + DOT3 if claim.startswith("claim =") else DOT3 + claim, "bad.toml"))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_malformed_claims_on_a_matrix_name_the_claimed_part():
    with pytest.raises(ExampleError, match=r"an argmax claim needs one row; scores\[1, 2\] has shape \(\)"):
        verify(parse(MAT + '[[claim]]\nstep = "scores"\nindex = [1, 2]\nrelation = "argmax"\nvalue = 1\n', "m.toml"))
    with pytest.raises(ExampleError, match=r"scores\[2\] has 3 number\(s\) \(shape \(3,\)\); the claim writes 2"):
        verify(parse(MAT + '[[claim]]\nstep = "scores"\nindex = [2]\nvalue = [2, 4]\n', "m.toml"))


def _claims(*claims: tuple[str, str, str]) -> str:
    return "".join(f'[[claim]]\nstep = "{s}"\n' + (f"index = {i}\n" if i else "") + f"value = {v}\n" for s, i, v in claims)


def test_verdicts_keep_the_file_order_number_and_all_ok():
    # two claims on one step (kept in file order), one before them on a later step
    text = DOT3 + _claims(("weights", "[2]", "0.67"), ("scores", "[3]", "2"), ("scores", "[1]", "7"))
    v = verify(parse(text, "t.toml"))
    assert [(x.n, x.where(), x.status) for x in v] == [(1, "scores[3]", EXACT), (2, "scores[1]", WRONG), (0, "weights[2]", EXACT)]
    assert not all_ok(v) and all_ok(v[:1] + v[2:])
    assert verify(parse(DOT3, "t.toml")) == [] and all_ok([])


def test_double_rounding_is_checked_on_the_unrounded_value_of_the_claimed_step():
    # scores [0.249, 0.10]: 0.3 for 0.249 is 0.249 → 0.25 → 0.3 (double rounding), not a value at the
    # working precision (P = 2 from 0.10): the claimed step itself is never pre-rounded.
    text = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[0.249], [0.1]]\n' + _claims(
        ("scores", "[1]", "0.3"), ("scores", "[2]", "0.10"))
    v = verify(parse(text, "t.toml"))
    assert (v[0].status, v[0].rule) == (DRIFT, "double rounding")
    assert v[1].status == EXACT


def test_an_argmax_claim_can_drift_from_the_written_values():
    # scores [0.6, 1.4] written at 0 decimals as [1, 1]: softmax([1, 1]) ties, its first largest is position 1,
    # so "argmax = 1" follows the example's own values (the true position is 2)
    text = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[0.6], [1.4]]\n' + _claims(("scores", "", "[1, 1]"))
    text += '[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 1\n'
    v = verify(parse(text, "t.toml"))
    assert v[0].status == EXACT
    assert (v[1].status, v[1].rule, v[1].true) == (DRIFT, "own values", 2)


def _softmax(e):
    e = np.asarray(e, dtype=float)
    return np.exp(e - e.max()) / np.exp(e - e.max()).sum()


def test_a_wrong_argmax_reports_its_own_position_and_is_not_after_a_value_that_keeps_it():
    # scores [2, 0.5, 0.5]; the wrong scores[1] = 1.0 lowers weight 1 from 0.69 to 0.45, still the largest
    w, moved = _softmax([2, 0.5, 0.5]), _softmax([1.0, 0.5, 0.5])
    assert round(w[0], 2) == 0.69 and round(moved[0], 2) == 0.45 and np.argmax(moved) == 0
    text = 'mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[2.0], [0.5], [0.5]]\n' + _claims(("scores", "[1]", "1.0"))
    text += '[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 2\n'
    v = verify(parse(text, "t.toml"))
    assert v[0].status == WRONG
    assert (v[1].status, v[1].true, v[1].own, v[1].upstream, v[1].follows_from) == (WRONG, 1, 1, "", "")
    assert v[1].true_max == pytest.approx(w[0], abs=1e-12)
    # the wrong 5.0 in [5, 3, 2] moves the argmax to 1: the example's own values give position 1
    text = DOT3 + _claims(("scores", "[1]", "5.0")) + '[[claim]]\nstep = "weights"\nrelation = "argmax"\nvalue = 1\n'
    v = verify(parse(text, "t.toml"))
    assert (v[1].status, v[1].true, v[1].own, v[1].follows_from) == (WRONG, 2, 1, "scores[1]")


def test_scaled_scores_written_as_scores_is_another_step_with_its_formula():
    # scaled_dot: scores qᵀk = [3, 4], scaled by 1/√2: [2.1213, 2.8284]; written under "scores"
    text = 'mechanism = "scaled_dot"\n[inputs]\nquery = [1.0, 1.0]\nkeys = [[1.0, 2.0], [4.0, 0.0]]\n'
    assert np.round(np.array([3, 4]) / np.sqrt(2), 2).tolist() == [2.12, 2.83]
    ex = parse(text + _claims(("scores", "", "[2.12, 2.83]")), "t.toml")
    (v,) = verify(ex)
    t = run(ex)
    assert (v.status, v.rule) == (OTHER_STEP, "scaled_scores")
    assert v.extra["formula"] == t["scaled_scores"].formula and v.extra["formula"] != t["scores"].formula


def test_another_step_is_found_past_steps_of_another_shape():
    # additive, W_q = W_k = I, v = [1, 1], q = 0: scores_j = Σ tanh(k_j) = [tanh 1, tanh 1, 0] = [0.7616, 0.7616, 0];
    # the steps before "scores" (projected query (2,), projected keys / preactivation / tanh (3, 2)) have other shapes
    assert np.round([np.tanh(1.0), np.tanh(1.0), 0.0], 2).tolist() == [0.76, 0.76, 0.0]
    text = ('mechanism = "additive"\n[inputs]\nquery = [0.0, 0.0]\nkeys = [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]\n'
            '[params]\nw_q = [[1.0, 0.0], [0.0, 1.0]]\nw_k = [[1.0, 0.0], [0.0, 1.0]]\nv = [1.0, 1.0]\n')
    (v,) = verify(parse(text + _claims(("weights", "", "[0.76, 0.76, 0.00]")), "t.toml"))
    assert (v.status, v.rule) == (OTHER_STEP, "scores")
