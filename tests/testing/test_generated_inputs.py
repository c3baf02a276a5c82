"""check(fn, examples=N): generated shapes (zero lengths included), masks and NaN/inf at unattended keys
(hypothesis) pass a correct implementation, and each planted defect is caught, named, shrunk to a small
input and reproduced. The defective implementations are written here."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings

import attnlab
from attnlab.testing import RuleBroken, check, judge
from attnlab.testing.generate import Spec, build, specs

pytestmark = pytest.mark.usefixtures("one_thread")


def ours(q, k, v, mask):
    return attnlab.attention(q, k, v, mask=mask)


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def nan_leak(q, k, v, mask):
    """Fully masked rows right (NaN weights set to 0), but 0 · NaN from a masked value reaches the output."""
    return torch.nan_to_num(_scores(q, k).masked_fill(~mask, -torch.inf).softmax(-1)) @ v


def minus_1e9(q, k, v, mask):
    return _scores(q, k).masked_fill(~mask, -1e9).softmax(-1) @ v


def inverted(q, k, v, mask):
    return attnlab.attention(q, k, v, mask=~mask)


def _generated(report):
    (failure,) = [f for f in report.failures if f.case.startswith("generated inputs")]
    return failure


def _small(failure) -> bool:
    b, h, n, d = failure.inputs["q"].shape
    return b <= 1 and h == 1 and n <= 2 and failure.inputs["k"].shape[-2] <= 2 and d <= 2


def test_a_conforming_implementation_passes_every_generated_input():
    report = check(ours, examples=60, dtypes=(torch.float32, torch.float64))
    assert report.ok, str(report)
    assert {"generated inputs (60 examples) [float32, cpu]", "generated inputs (60 examples) [float64, cpu]"} <= set(report.passed)


# nan_leak breaks two rules on one input (a planted NaN reaches a row that attends something, and a
# fully masked row): which one the shrunk input shows depends on the path hypothesis shrinks along.
@pytest.mark.parametrize("fn,rules,planted", [
    (nan_leak, ("NaN in a masked value reached the output", "a fully masked row gives NaN"), "masked NaN value"),
    (minus_1e9, ("a fully masked row is not zero",), None),
    (inverted, ("differs from the reference",), None),
])
def test_a_planted_defect_is_caught_and_shrunk_to_a_small_input(fn, rules, planted):
    failure = _generated(check(fn, examples=100))
    assert failure.rule in rules
    assert _small(failure), failure.shape()
    assert failure.inputs["judge"] == (planted or "values")
    with pytest.raises(RuleBroken) as err:
        exec(failure.reproducer(), {"fn": fn})
    assert str(err.value) == failure.message


def test_the_nan_leak_alone_passes_the_fixed_fully_masked_case_but_not_the_generated_ones():
    report = check(nan_leak, examples=100)
    assert "fully masked row [float32, cpu]" in report.passed
    assert "NaN in a masked value reached the output" in report.rules()


def test_generated_specs_cover_zero_lengths_every_mask_and_every_plant():
    seen = []

    @settings(max_examples=300, database=None, deadline=None)
    @given(specs())
    def collect(spec):
        seen.append(spec)
    collect()
    assert {0} <= {s.b for s in seen} and {0} <= {s.q for s in seen} and {0} <= {s.k for s in seen}
    assert {s.mask for s in seen} == {"none", "key padding", "broadcast (q, k)", "random", "fully masked rows"}
    assert {s.plant for s in seen} == {None, "masked NaN value", "masked inf key"}


def test_build_plants_only_at_keys_no_query_may_attend():
    name, s = build(Spec(b=2, h=2, q=3, k=5, d=2, mask="random", plant="masked NaN value", seed=3))
    assert name == "masked NaN value"
    attended = s.allow.any(-2)  # (b, h, k)
    assert torch.isnan(s.v[~attended]).all() and torch.isfinite(s.v[attended]).all()
    _, row = build(Spec(b=1, h=2, q=2, k=3, d=1, mask="fully masked rows", plant=None, seed=0))
    assert not row.allow[..., 0, :].any()


def test_build_plants_nan_in_the_values_or_inf_in_the_keys_no_query_may_attend():
    spec = dict(b=2, h=1, q=2, k=4, d=2, mask="key padding", seed=0)
    name, s = build(Spec(**spec, plant="masked NaN value"))
    unattended = ~s.allow[:, 0, 0, :]  # (b, k): a key padding mask, the same for every query
    assert name == "masked NaN value" and unattended.any()
    assert torch.isnan(s.v[:, 0][unattended]).all() and torch.isfinite(s.v[:, 0][~unattended]).all()
    assert torch.isfinite(s.k).all()
    name, s = build(Spec(**spec, plant="masked inf key"))
    assert name == "masked inf key"
    assert torch.equal(torch.isinf(s.k[:, 0]).all(-1), unattended) and (s.k[:, 0][unattended] > 0).all()
    assert torch.isfinite(s.v).all()


def test_check_tries_as_many_generated_inputs_as_it_is_asked():
    from attnlab.testing.generate import smallest_failure

    tried = []
    assert smallest_failure(lambda name, s: tried.append(name), "qkv_mask", 7, seed=0) is None  # every one passes
    assert len(tried) == 7


@settings(max_examples=25, database=None, deadline=None)
@given(specs("qkv_padding"))
def test_the_strategy_in_a_users_own_property_test(spec):
    name, s = build(spec)
    assert s.allow.shape[1:3] == (1, 1)  # a padding signature only gets (b, 1, 1, k) masks
    q, k, v = (t.requires_grad_() for t in (s.q, s.k, s.v))
    judge(name, attnlab.attention(q, k, v, mask=s.allow)[0], q, k, v, allow=s.allow)


def test_generation_needs_hypothesis_only_when_asked(monkeypatch):
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # `import hypothesis` now raises ImportError
    assert check(ours).ok
    with pytest.raises(ImportError, match=r"pip install 'attnlab\[testing\]'"):
        check(ours, examples=5)
    code = "import sys; sys.modules['hypothesis'] = None; import attnlab.testing, attnlab.testing.generate"
    subprocess.run([sys.executable, "-c", code], check=True)
