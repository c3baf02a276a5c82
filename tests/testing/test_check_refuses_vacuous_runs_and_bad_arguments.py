"""``check`` refuses, before the function under test is called, a run that would try nothing (no dtype,
no device, no case) and every bad argument, in one line naming the argument."""

from __future__ import annotations

import pytest
import torch

import attnlab
from attnlab.testing import check
from attnlab.testing.cases import CASES

NAMES = [c.name for c in CASES]
REFUSALS = [
    ({"dtypes": []}, ValueError,
     "dtypes=[] selects nothing, so no case would run; give at least one, e.g. dtypes=(torch.float32,)"),
    ({"devices": []}, ValueError,
     "devices=[] selects nothing, so no case would run; give at least one, e.g. devices=('cpu',)"),
    ({"cases": ()}, ValueError,
     "cases=() selects nothing, so no case would run; give at least one, e.g. cases=('values',)"),
    ({"dtypes": [torch.int64]}, ValueError,
     "dtypes: torch.int64 is not a dtype the checker runs attention in; give torch.float32, torch.float64, "
     "torch.float16 or torch.bfloat16"),
    ({"dtypes": [torch.complex64]}, ValueError,
     "dtypes: torch.complex64 is not a dtype the checker runs attention in; give torch.float32, torch.float64, "
     "torch.float16 or torch.bfloat16"),
    ({"dtypes": ["float32"]}, TypeError,
     "dtypes: 'float32' is not a torch.dtype; give torch.float32, torch.float64, torch.float16 or torch.bfloat16"),
    ({"dtypes": torch.float32}, TypeError,
     "dtypes=torch.float32 is not a sequence; give a list or tuple, e.g. dtypes=(torch.float32,)"),
    ({"devices": "cpu"}, TypeError, "devices='cpu' is not a sequence; give a list or tuple, e.g. devices=('cpu',)"),
    ({"devices": ["gpu0"]}, ValueError,
     "devices: 'gpu0' is not a device name; give names such as 'cpu', 'cuda' or 'cuda:1'"),
    ({"devices": ["meta"]}, ValueError,
     "devices: 'meta' is not a device the checker runs on; give 'cpu', 'cuda' or 'mps'"),
    ({"devices": [0]}, TypeError, "devices: 0 is not a device; give names such as 'cpu' or 'cuda'"),
    ({"seed": 2**32}, ValueError, "seed=4294967296 is out of range; give an integer from 0 to 2**32 - 1"),
    ({"seed": -1}, ValueError, "seed=-1 is out of range; give an integer from 0 to 2**32 - 1"),
    ({"seed": 1.5}, TypeError, "seed=1.5 is not an integer; give one from 0 to 2**32 - 1"),
    ({"examples": -1}, ValueError,
     "examples=-1 is not an integer >= 0 (the number of generated inputs; 0 for none)"),
    ({"timeout": 0}, ValueError,
     "timeout=0 is not a positive number of seconds; give one (e.g. 60), or None for no limit"),
    ({"timeout": float("nan")}, ValueError,
     "timeout=nan is not a positive number of seconds; give one (e.g. 60), or None for no limit"),
    ({"scale": float("inf")}, ValueError,
     "scale=inf is not a finite number; give the factor on q·k that the function applies, or None for 1/√d"),
    ({"grad": "yes"}, TypeError, "grad='yes' is not True or False"),
    ({"cases": ["value"]}, ValueError, f"cases: 'value' is not a case of the checker; the cases are {NAMES}"),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), REFUSALS, ids=[str(r[0]) for r in REFUSALS])
def test_a_bad_or_vacuous_argument_is_refused_before_the_function_runs(kwargs, error, message):
    calls = []
    with pytest.raises(error) as refused:
        check(lambda *a: calls.append(a), **kwargs)
    assert str(refused.value) == message
    assert calls == []


def test_cases_the_signature_cannot_express_are_a_run_of_nothing():
    with pytest.raises(ValueError) as refused:
        check(lambda q, k, v, c: attnlab.attention(q, k, v, causal=c)[0], signature="qkv_causal",
              cases=("values", "masked NaN value"))
    assert str(refused.value) == (
        "no case ran: the signature 'qkv_causal' cannot express the mask of any case in "
        "cases=['values', 'masked NaN value']; choose cases it can express or another signature")


def test_a_device_that_is_not_there_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError) as refused:
        check(attnlab.attention, devices=["cpu", "cuda"])
    assert str(refused.value) == ("devices: 'cuda' is not available here (torch.cuda.is_available() is False); "
                                  "check on 'cpu', or on a machine with CUDA")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError) as refused:
        check(attnlab.attention, devices=[torch.device("cuda", 3)])
    assert str(refused.value) == ("devices: 'cuda:3' is not available here: this machine has 2 CUDA device(s), "
                                  "cuda:0 to cuda:1")


def test_a_function_that_is_not_callable_is_refused():
    with pytest.raises(TypeError) as refused:
        check("attnlab.attention")
    assert str(refused.value) == "fn='attnlab.attention' is not callable; give the attention function to check"


def test_a_selection_of_cases_runs_those_cases_only_and_the_largest_seed_is_accepted():
    report = check(lambda q, k, v, m: attnlab.attention(q, k, v, mask=m)[0], cases=("causal", "values"),
                   seed=2**32 - 1, grad=False)
    assert report.passed == ["values [float32, cpu]", "causal [float32, cpu]"]  # in the checker's order
