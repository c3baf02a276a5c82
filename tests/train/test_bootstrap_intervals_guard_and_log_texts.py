"""The bootstrap intervals of BLEU, chrF and exact match against a bootstrap redone here (the same
seeded draws, each resample's text scored again by sacrebleu and percentiles taken by NumPy), the
non-finite guard's counts and full messages, and the run log's file text."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch

from attnlab.train import finite, metrics, runlog
from attnlab.train.finite import FiniteGuard, NonFiniteError

sacrebleu = pytest.importorskip("sacrebleu")

HYPS = ["the cat sat on the mat", "a dog ran", "abc", "one two three four", "x y"]
REFS = ["the cat sat on a mat", "a dog ran", "abcd", "one two three five", "x z"]


def _bootstrap(hyps, refs, resamples, seed, level):
    """Draw len(refs) indices with replacement per resample, as numpy's generator does, and score the text."""
    rng = np.random.default_rng(seed)
    out = {"exact": [], "bleu": [], "chrf": []}
    for _ in range(resamples):
        idx = rng.integers(0, len(refs), len(refs))
        h, r = [hyps[i] for i in idx], [refs[i] for i in idx]
        out["exact"].append(100.0 * sum(a == b for a, b in zip(h, r)) / len(r))
        out["bleu"].append(sacrebleu.corpus_bleu(h, [r]).score)
        out["chrf"].append(sacrebleu.corpus_chrf(h, [r]).score)
    tail = 100 * (1 - level) / 2
    return {k: (np.percentile(v, tail), np.percentile(v, 100 - tail)) for k, v in out.items()}


@pytest.mark.parametrize("seed,level", [(0, 0.95), (3, 0.8)])
def test_intervals_equal_a_bootstrap_that_scores_each_resample_again(seed, level):
    got = metrics.intervals(HYPS, REFS, resamples=30, seed=seed, level=level)
    want = _bootstrap(HYPS, REFS, 30, seed, level)
    assert list(got) == ["exact", "bleu", "chrf"]
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
        assert isinstance(got[k], tuple) and all(type(x) is float for x in got[k])


def test_intervals_defaults_are_a_thousand_resamples_seed_zero_and_95_percent():
    defaults = {
        k: p.default
        for k, p in inspect.signature(metrics.intervals).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    assert defaults == {"resamples": 1000, "seed": 0, "level": 0.95}
    got = metrics.intervals(HYPS[:3], REFS[:3])
    want = _bootstrap(HYPS[:3], REFS[:3], 1000, 0, 0.95)
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
    # with one sentence every resample is that sentence: a point
    one = metrics.intervals(["abc"], ["abcd"], resamples=5)
    assert one["exact"] == (0.0, 0.0)
    chrf = sacrebleu.corpus_chrf(["abc"], [["abcd"]]).score
    assert one["chrf"] == pytest.approx((chrf, chrf), abs=1e-9)


@pytest.mark.parametrize("hyps,refs", [(["a"], ["a", "b"]), ([], [])])
def test_intervals_refuse_unequal_or_empty_lists(hyps, refs):
    with pytest.raises(ValueError) as e:
        metrics.intervals(hyps, refs)
    assert str(e.value) == (
        "intervals need as many hypotheses as references, at least one; "
        f"got {len(hyps)} and {len(refs)}"
    )


def test_scores_are_sacrebleus_and_the_keys_in_order():
    s = metrics.scores(iter(HYPS), iter(REFS))  # any iterables
    assert list(s) == ["exact", "bleu", "chrf", "n"]
    assert s["n"] == 5 and s["exact"] == pytest.approx(20.0)
    assert s["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score, abs=1e-9)
    assert s["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score, abs=1e-9)


# -- the non-finite guard -------------------------------------------------------------------------


def _model():
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 1)
    return m, torch.optim.SGD(m.parameters(), lr=0.5)


def _grad(m, bad=False):
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    if bad:
        m.bias.grad[0] = float("inf")


def test_the_guard_counts_steps_from_first_step_and_names_the_first_bad_one():
    m, opt = _model()
    g = FiniteGuard(opt, first_step=7)
    assert g.mode == "stop" and g.count == 7 and g.skipped == 0
    assert g.ok.dtype == torch.bool and bool(g.ok) and int(g.bad) == 0 and int(g.first) == -1
    _grad(m, bad=True)
    g.step()  # step 8
    _grad(m, bad=True)
    g.step()  # step 9: the first stays 8
    assert g.count == 9 and int(g.bad) == 2 and int(g.first) == 8 and not bool(g.ok)
    assert float(g.keep(torch.tensor(5.0), 1.0)) == 1.0  # the last step was bad: the old value
    with pytest.raises(NonFiniteError) as e:
        g.read()
    assert str(e.value) == (
        "training stopped: the gradients became non-finite (NaN or infinite) at step 8; nothing was saved after "
        "it (the last checkpoint is left as it was): lower --lr (or another setting), or pass --on-nonfinite skip "
        "to drop such steps"
    )
    assert int(g.bad) == 0  # the read zeroes the count


def test_skip_mode_counts_what_it_dropped_over_reads_and_a_step_without_gradients_is_fine():
    m, opt = _model()
    g = FiniteGuard(opt, "skip")
    w0 = m.weight.detach().clone()
    _grad(m, bad=True)
    g.step()
    assert torch.equal(m.weight, w0)  # the update dropped
    assert g.read() == 1 and g.read() == 1  # a second read adds nothing
    _grad(m, bad=True)
    g.step()
    _grad(m)
    g.step()  # a good step moves the weights by lr * grad
    assert torch.allclose(m.weight, w0 - 0.5) and g.read() == 2 and g.skipped == 2
    m.weight.grad = m.bias.grad = None
    g.step()  # no gradients at all: counted as finite
    assert bool(g.ok) and g.read() == 2 and g.count == 4


def test_zero_grad_clears_to_none_by_default_or_to_zeros():
    m, opt = _model()
    g = FiniteGuard(opt)
    _grad(m)
    g.zero_grad()
    assert m.weight.grad is None
    _grad(m)
    g.zero_grad(set_to_none=False)
    assert torch.equal(m.weight.grad, torch.zeros_like(m.weight))


def test_the_loss_and_weight_checks_in_full():
    m, opt = _model()
    g = FiniteGuard(opt, "skip", first_step=3)
    g.check_loss(0.0)
    with pytest.raises(NonFiniteError) as e:
        g.check_loss(float("inf"), "the training loss")
    hint = "lower --lr (or another setting), or pass --on-nonfinite skip to drop such steps"
    assert str(e.value) == (
        "training stopped at step 3: the training loss is inf (the model diverged); nothing was saved after it "
        f"(the last checkpoint is left as it was): {hint}"
    )
    with pytest.raises(
        NonFiniteError, match="^training stopped at step 3: the validation loss is nan "
    ):
        g.check_loss(float("nan"))
    with torch.no_grad():
        m.bias[0] = float("nan")
    with pytest.raises(NonFiniteError) as e:
        g.check_weights(m)
    assert str(e.value) == (
        "training stopped at step 3: the weights became non-finite (NaN or infinite) and were not saved "
        f"(the last checkpoint is left as it was): {hint}"
    )
    g.check_weights(torch.nn.Module())  # nothing to check
    assert finite.HINT == hint and finite.ON_NONFINITE == ("stop", "skip")
    assert finite.check_mode("skip") == "skip" and issubclass(NonFiniteError, ValueError)


def test_check_weights_reads_the_bad_steps_first():
    m, opt = _model()
    g = FiniteGuard(opt)
    _grad(m, bad=True)
    g.step()
    with pytest.raises(NonFiniteError, match="gradients became non-finite .* at step 1;"):
        g.check_weights(m)


def test_skip_mode_puts_back_a_state_the_bad_step_created_as_zeros():
    torch.manual_seed(0)
    m = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    g = FiniteGuard(opt, "skip")
    _grad(m, bad=True)
    g.step()  # the first step creates the momentum buffers: they stay zeros
    for p in m.parameters():
        assert torch.equal(opt.state[p]["momentum_buffer"], torch.zeros_like(p))


# -- the run log ----------------------------------------------------------------------------------


def test_the_log_text_is_one_compact_object_a_line_with_non_ascii_kept_and_non_finite_as_null(
    tmp_path,
):
    recs = [
        {"step": 1, "loss": 2.5, "note": "ä"},
        {"step": 2, "valid_loss": float("-inf"), "x": float("nan")},
    ]
    text = runlog.jsonl(recs)
    assert (
        text
        == '{"step": 1, "loss": 2.5, "note": "ä"}\n{"step": 2, "valid_loss": null, "x": null}\n'
    )
    assert runlog.jsonl([]) == ""
    with pytest.raises(ValueError):
        runlog.to_jsonl([{"step": 1, "loss": float("nan")}])  # the raw writer refuses NaN
    assert runlog.NAME == "metrics.jsonl"
    (tmp_path / "metrics.jsonl").write_text(text, encoding="utf-8")
    assert runlog.read(str(tmp_path)) == [
        {"step": 1, "loss": 2.5, "note": "ä"},
        {"step": 2, "valid_loss": None, "x": None},
    ]


def test_reading_a_run_without_a_log_or_with_a_broken_line(tmp_path):
    assert runlog.read(tmp_path) == []
    (tmp_path / "metrics.jsonl").mkdir()  # not a file
    assert runlog.read(tmp_path) == []
    (tmp_path / "metrics.jsonl").rmdir()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2,\n')
    with pytest.raises(ValueError) as e:
        runlog.read(tmp_path)
    try:
        json.loads('{"step": 2,')
    except json.JSONDecodeError as err:
        why = err.msg  # the decoder's own words, without the position
    assert str(e.value) == f"{tmp_path / 'metrics.jsonl'}, line 2: not a JSON object ({why})"
