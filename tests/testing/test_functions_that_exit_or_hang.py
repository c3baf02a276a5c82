"""A function under test that exits or hangs fails the case it did it in, and the report still comes
back: ``sys.exit`` is a failure like any exception; a call that outlasts ``timeout`` fails as hung and
the cases after it are not run (each call runs in a daemon thread the checker waits on)."""

from __future__ import annotations

import sys
import threading

import pytest
import torch

import attnlab
from attnlab.testing import check
from attnlab.testing.report import HUNG

TAG = " [float32, cpu]"


def test_sys_exit_and_system_exit_are_failures_of_the_function():
    def exits(q, k, v, mask):
        sys.exit(0)

    report = check(exits, cases=("values", "causal"))
    assert [(f.case, f.rule, f.message, f.shape()) for f in report.failures] == [
        ("values" + TAG, "raised SystemExit", "raised SystemExit (sys.exit(0)): the function tried to exit",
         "b=1 h=1 q=1 k=2 d=1"),
        ("causal" + TAG, "raised SystemExit", "raised SystemExit (sys.exit(0)): the function tried to exit",
         "b=1 h=1 q=2 k=2 d=1"),
    ]

    def raises_exit(q, k, v, mask):
        raise SystemExit("bye")

    (failure,) = check(raises_exit, cases=("values",), timeout=None).failures
    assert failure.message == "raised SystemExit (sys.exit('bye')): the function tried to exit"


def test_a_keyboard_interrupt_in_the_function_stops_the_check():
    def interrupted(q, k, v, mask):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check(interrupted, cases=("values",))


def test_a_call_that_hangs_fails_its_case_and_the_cases_after_it_are_not_run():
    release = threading.Event()

    def hangs_without_keys(q, k, v, mask):
        if k.shape[-2] == 0:
            release.wait()
        return attnlab.attention(q, k, v, mask=mask)[0]

    try:
        report = check(hangs_without_keys, cases=("values", "empty keys (k = 0)", "empty batch (b = 0)"),
                       examples=5, timeout=3)
    finally:
        release.set()
    assert [(f.case, f.rule, f.message) for f in report.failures] == [
        ("empty keys (k = 0)" + TAG, HUNG,
         "did not return within the time limit (3 s per case); the cases after it were not run")]
    assert report.passed == ["values" + TAG]
    assert report.not_run == ["empty batch (b = 0)" + TAG, "generated inputs (5 examples)" + TAG]
    assert str(report).splitlines()[2:4] == [
        "  passed: values" + TAG,
        "  not run (the function hung in an earlier case): empty batch (b = 0)" + TAG
        + ", generated inputs (5 examples)" + TAG,
    ]


def test_a_hang_in_a_generated_input_is_reported_at_once_not_shrunk():
    release = threading.Event()
    hung = []

    def hangs_without_queries(q, k, v, mask):
        if q.shape[-2] == 0:
            hung.append(tuple(q.shape))
            release.wait()
        return attnlab.attention(q, k, v, mask=mask)[0]

    try:
        report = check(hangs_without_queries, cases=("values",), examples=200, timeout=2, grad=False)
    finally:
        release.set()
    (failure,) = report.failures
    assert (failure.case, failure.rule) == ("generated inputs (200 examples)" + TAG, HUNG)
    assert len(hung) == 1 and failure.inputs["q"].shape[-2] == 0


def test_each_call_runs_in_its_own_thread_with_the_callers_grad_mode_or_here_without_a_limit():
    seen = []

    def where(q, k, v, mask):
        seen.append((threading.current_thread() is threading.main_thread(), torch.is_grad_enabled()))
        return attnlab.attention(q, k, v, mask=mask)[0]

    with torch.no_grad():
        assert check(where, cases=("values",), grad=False).ok
    assert set(seen) == {(False, False)}
    seen.clear()
    assert check(where, cases=("values",), timeout=None).ok
    assert set(seen) == {(True, True)}


def test_a_hang_while_a_failure_is_shrunk_stops_the_shrinking_and_the_check():
    release = threading.Event()

    def wrong_when_large_hangs_when_small(q, k, v, mask):
        if k.shape[-2] < 10:
            release.wait()
        return attnlab.attention(q, k, v, mask=mask, scale=1.0)[0]

    try:
        report = check(wrong_when_large_hangs_when_small, cases=("values", "causal"), timeout=2, grad=False)
    finally:
        release.set()
    assert [(f.case, f.rule, f.shape()) for f in report.failures] == [("values" + TAG, HUNG, "b=1 h=1 q=1 k=2 d=1")]
    assert report.not_run == ["causal" + TAG]
