"""The one training loop (``train.fit.fit``) on a task written here: a linear model on fixed data
trained with SGD, whose parameters after k steps and logged losses are computed by hand in float64
NumPy; a run stopped and resumed ends where an uninterrupted one does."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlab.train import runlog
from attnlab.train.checkpoint import CheckpointError
from attnlab.train.fit import FitConfig, Step, TrainResult, fit

RNG = np.random.default_rng(0)
X = RNG.normal(size=(8, 3))
Y = RNG.normal(size=8)
W0, B0 = np.array([0.5, -0.25, 1.0]), 0.125
LR, ROWS = 0.1, 2  # two rows per step: step i takes rows 2i, 2i + 1 (mod 8)


class Linear(Step):
    """y = x·w + b, squared error summed over the batch (so the loop's gradient is the batch mean's)."""

    def __init__(self):
        self.model = torch.nn.Linear(3, 1)
        with torch.no_grad():
            self.model.weight.copy_(torch.tensor(W0[None], dtype=torch.float32))
            self.model.bias.fill_(B0)

    def optimizer(self):
        return torch.optim.SGD(self.model.parameters(), lr=LR)

    def batch(self, step, rt):
        idx = [(ROWS * step + j) % len(X) for j in range(ROWS)]
        return (torch.tensor(X[idx], dtype=torch.float32), torch.tensor(Y[idx], dtype=torch.float32)), True

    def loss_sum(self, net, batch):
        x, y = batch
        return ((net(x)[:, 0] - y) ** 2).sum(), len(y)

    def model_config(self):
        return {"kind": "linear", "in": 3}


def by_hand(steps: int, skip: int | None = None) -> tuple[np.ndarray, float, list[float]]:
    """SGD on the batch mean of the squared error, in float64: the weights, the bias and each step's
    loss (the step of index ``skip`` taken out)."""
    w, b, losses = W0.copy(), B0, []
    for i in range(steps):
        if i == skip:
            continue
        idx = [(ROWS * i + j) % len(X) for j in range(ROWS)]
        r = X[idx] @ w + b - Y[idx]
        losses.append(float((r**2).mean()))
        w, b = w - LR * 2 * X[idx].T @ r / ROWS, b - LR * 2 * r.mean()
    return w, b, losses


def _params(task) -> tuple[np.ndarray, float]:
    return task.model.weight.detach().double().numpy()[0], float(task.model.bias.detach())


def test_the_parameters_after_k_steps_are_sgd_by_hand():
    task = Linear()
    result = fit(task, FitConfig(steps=7, log_every=3, clip=0.0))
    w, b, losses = by_hand(7)
    got_w, got_b = _params(task)
    np.testing.assert_allclose(got_w, w, rtol=1e-5, atol=1e-6)
    assert got_b == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert isinstance(result, TrainResult) and result.step == result.steps == 7
    # logged at steps 3, 6 and the end: the mean loss of each interval (every step's batch has 2 rows)
    assert [r["step"] for r in result.history] == [3, 6, 7]
    expected = [np.mean(losses[0:3]), np.mean(losses[3:6]), losses[6]]
    np.testing.assert_allclose([r["loss"] for r in result.history], expected, rtol=1e-5)
    assert result.train_loss == pytest.approx(losses[6], rel=1e-5)
    assert result.tokens_per_s == result.tokens_per_second > 0


def test_a_stopped_run_resumes_to_the_parameters_and_losses_of_an_uninterrupted_one(tmp_path):
    cfg = FitConfig(steps=10, log_every=3, save_every=4, clip=0.0)
    whole = Linear()
    r_whole = fit(whole, cfg, out=tmp_path / "whole")
    cut = Linear()
    r_cut = fit(cut, cfg, out=tmp_path / "cut", stop_after=6)  # killed after step 6: the checkpoint is step 4
    assert r_cut.step == 6
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["state"]["step"] == 4
    resumed = Linear()
    r_res = fit(resumed, cfg, out=tmp_path / "cut", resume=True)
    assert r_res.step == 10
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    w, b, losses = by_hand(10)
    np.testing.assert_allclose(_params(resumed)[0], w, rtol=1e-5, atol=1e-6)
    # the interval that the checkpoint cut (steps 4..6) is logged as in the whole run: its sum was saved
    drop = ("wall_s", "tokens_per_s")
    strip = [{k: v for k, v in r.items() if k not in drop} for r in runlog.read(tmp_path / "whole")]
    assert [{k: v for k, v in r.items() if k not in drop} for r in runlog.read(tmp_path / "cut")] == strip
    assert [r["step"] for r in r_whole.history] == [3, 6, 9, 10]
    np.testing.assert_allclose([r["loss"] for r in strip], [np.mean(losses[i:j]) for i, j in ((0, 3), (3, 6), (6, 9), (9, 10))],
                               rtol=1e-5)


def test_resume_refuses_another_model_and_a_missing_checkpoint(tmp_path):
    cfg = FitConfig(steps=4, save_every=2, clip=0.0)
    fit(Linear(), cfg, out=tmp_path / "run")
    other = Linear()
    other.model_config = lambda: {"kind": "linear", "in": 4}
    with pytest.raises(CheckpointError, match="of another model"):
        fit(other, cfg, out=tmp_path / "run", resume=True)
    with pytest.raises(CheckpointError, match="no checkpoint to resume"):
        fit(Linear(), cfg, out=tmp_path / "none", resume=True)


def test_a_non_finite_step_is_skipped_or_stops_the_run(tmp_path):
    from attnlab.train.finite import NonFiniteError

    class Poisoned(Linear):
        def batch(self, step, rt):
            (x, y), real = super().batch(step, rt)
            return (x, y * float("nan") if step == 2 else y), real

    task = Poisoned()
    result = fit(task, FitConfig(steps=5, log_every=5, clip=0.0, on_nonfinite="skip"))
    assert result.history[-1]["skipped"] == 1
    w, b, losses = by_hand(5, skip=2)  # steps 1 and 2 taken, step 3 skipped; steps 4 and 5 from there
    np.testing.assert_allclose(_params(task)[0], w, rtol=1e-5, atol=1e-6)
    assert result.history[-1]["loss"] == pytest.approx(np.mean(losses), rel=1e-5)  # the skipped step not counted
    with pytest.raises(NonFiniteError, match="at step 3"):
        fit(Poisoned(), FitConfig(steps=5, save_every=1, clip=0.0), out=tmp_path / "stop")
    assert json.loads((tmp_path / "stop" / "config.json").read_text())["state"]["step"] == 2


def test_fit_config_checks_its_fields():
    with pytest.raises(ValueError, match="steps must be >= 1; got 0"):
        FitConfig(steps=0)
    with pytest.raises(ValueError, match="save_every must be >= 0; got -1"):
        FitConfig(steps=3, save_every=-1)
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        FitConfig(steps=3, max_seconds=0.0)


def test_the_loss_is_read_to_the_host_where_the_loop_logs_not_at_every_step(monkeypatch):
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name, **k: (reads.append(_n), _o(self, *a, **k))[1])

    def count(steps: int) -> int:
        reads.clear()
        fit(Linear(), FitConfig(steps=steps, log_every=10, clip=0.0))
        return len(reads)

    c10, c20, c40 = count(10), count(20), count(40)  # one, two and four logs
    assert c40 - c20 == 2 * (c20 - c10)  # the reads grow with the logs...
    assert 0 < c20 - c10 <= 5  # ...a few each (the loss, its count, the guard's flags), none per step


def test_tokens_per_second_counts_each_logged_interval_alone(monkeypatch):
    import types

    from attnlab.train import fit as fit_module

    ticks = iter(range(1, 10_000))  # the loop's clock: a quarter second per reading
    monkeypatch.setattr(fit_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) / 4))
    result = fit(Linear(), FitConfig(steps=3, log_every=1, clip=0.0))
    # each step reads the clock twice in a row: 0.25 s a step, 2 rows (tokens) a step
    assert [r["tokens_per_s"] for r in result.history] == [8.0, 8.0, 8.0]
    assert result.tokens_per_s == 6 / 0.75


def test_a_captioner_stopped_within_an_epoch_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    from attnlab.models.captioner import Captioner, CaptionerConfig
    from attnlab.train.caption import CaptionTask

    g = torch.Generator().manual_seed(0)
    images = torch.rand(10, 3, 16, 16, generator=g)
    inp, tgt = torch.randint(1, 12, (10, 4), generator=g), torch.randint(1, 12, (10, 4), generator=g)

    def task() -> CaptionTask:
        torch.manual_seed(0)
        model = Captioner(CaptionerConfig(vocab_size=12, image_size=16, widths=(4, 8), d_model=8, num_heads=2, max_len=8))
        return CaptionTask(model, images, inp, tgt, epochs=3, batch_size=4, lr=1e-2, seed=0)  # 3 steps an epoch

    cfg = FitConfig(steps=9, log_every=3, save_every=1, clip=1.0)
    whole, cut, resumed = task(), task(), task()
    fit(whole, cfg, out=tmp_path / "whole")
    fit(cut, cfg, out=tmp_path / "cut", stop_after=5)  # within the second epoch: its permutation is drawn again
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["state"]["epoch"] == 1
    fit(resumed, cfg, out=tmp_path / "cut", resume=True)
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
