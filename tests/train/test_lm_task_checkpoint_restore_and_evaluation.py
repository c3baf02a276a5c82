"""The character GPT's task beyond its schedule: the validation loss as the mean of ``eval_batches``
random windows' losses (recomputed here with NumPy's log-softmax on the same windows), what its
checkpoint adds (the batch generator, the run's kind and settings, the vocabulary), every refusal of
a resume in full, and its records when there is no validation or a skipped step."""

from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
import torch

from attnlab.train import lm
from attnlab.train.checkpoint import CheckpointError, save_checkpoint
from attnlab.train.lm import LMTask, LMTrainConfig
from attnlab.train.runtime import Runtime

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "the cat sat on the mat. " * 4


def _cfg(**kw) -> LMTrainConfig:
    return LMTrainConfig(
        **{
            "steps": 1,
            "batch_size": 2,
            "block_size": 8,
            "dim": 8,
            "num_layers": 1,
            "num_heads": 2,
            **kw,
        }
    )


def test_the_validation_loss_is_the_mean_of_eval_batches_window_losses():
    torch.manual_seed(0)
    task = LMTask(TEXT, _cfg(eval_batches=3))
    task.model.train()
    gen_copy = torch.Generator().manual_seed(123)
    task.gen.manual_seed(123)
    got = task.evaluate(Runtime())
    assert list(got) == ["loss"] and task.model.training  # training mode put back
    losses = []
    task.model.eval()
    with torch.no_grad():
        for _ in range(3):
            x, y = lm.batch(task.val_ids, 2, 8, gen_copy)
            logits = task.model(x).double().numpy()  # (b, n, V)
            logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            losses.append(-np.take_along_axis(logp, y.numpy()[..., None], -1).mean())
    assert got["loss"] == pytest.approx(float(np.mean(losses)), rel=1e-5)
    assert torch.equal(task.gen.get_state(), gen_copy.get_state())  # the same draws, no more


def test_the_checkpoint_adds_the_batch_generator_the_kind_settings_data_and_vocabulary():
    cfg = _cfg()
    task = LMTask(TEXT, cfg, data={"name": "shakespeare"})
    task.gen.manual_seed(7)
    tensors, config, files = task.checkpoint(1, [])
    assert list(tensors) == ["rng.batches"] and torch.equal(
        tensors["rng.batches"], torch.Generator().manual_seed(7).get_state()
    )
    assert config == {"kind": "char-lm", "train": asdict(cfg), "data": {"name": "shakespeare"}}
    assert files == {"vocab.json": task.vocab.to_json()}
    assert "data" not in LMTask(TEXT, cfg).checkpoint(1, [])[1]


def test_resume_refusals_in_full(tmp_path):
    task = LMTask(TEXT, _cfg())
    good = {"rng.batches": torch.Generator().manual_seed(5).get_state()}
    vocab = {"vocab.json": task.vocab.to_json()}
    d = save_checkpoint(
        tmp_path / "other",
        {"w": torch.zeros(1)},
        {},
        {"vocab.json": LMTask("xyz " * 30, _cfg()).vocab.to_json()},
    )
    with pytest.raises(CheckpointError) as e:
        task.restore(d, good, {"state": {"step": 1}})
    assert (
        str(e.value)
        == f"--resume: the text has other characters than the run at {d} was trained on"
    )
    d = save_checkpoint(tmp_path / "ok", {"w": torch.zeros(1)}, {}, vocab)
    for tensors, config in (({}, {"state": {"step": 1}}), (good, {})):
        with pytest.raises(CheckpointError) as e:
            task.restore(d, tensors, config)
        assert (
            str(e.value)
            == f"--resume: {d} holds weights only (written before checkpoints kept the optimizer)"
        )
    with pytest.raises(CheckpointError) as e:
        task.restore(d, good, {"state": [1]})
    assert str(e.value) == f"--resume: {d}/config.json: 'state' must be an object; got list"
    with pytest.raises(ValueError) as e:
        task.restore(d, good, {"state": {"step": 1.5}})
    assert str(e.value) == f"--resume: {d}/config.json: state.step must be an integer >= 0; got 1.5"
    for ema in (float("nan"), True, "1"):
        with pytest.raises(CheckpointError) as e:
            task.restore(d, good, {"state": {"step": 1, "loss_ema": ema}})
        assert (
            str(e.value)
            == f"--resume: {d}/config.json: state.loss_ema must be a finite number; got {ema!r}"
        )
    assert task.restore(d, good, {"state": {"step": 3, "loss_ema": 2.5}}) == 3
    assert torch.equal(task.gen.get_state(), good["rng.batches"])  # the batch generator put back
    assert task.restore(d, good, {"state": {"step": 0}}) == 0


def test_records_and_lines_without_a_validation_and_with_skipped_steps():
    task = LMTask(TEXT, _cfg())
    train = {"loss": 1.23456, "tokens_per_s": 99.96, "skipped": 2}
    (rec,) = task.records(4, train, {})
    assert list(rec) == ["step", "train_loss", "val_loss", "tokens_per_second", "skipped"]
    assert (rec["step"], rec["train_loss"], rec["tokens_per_second"], rec["skipped"]) == (
        4,
        1.2346,
        100.0,
        2,
    )
    assert math.isnan(rec["val_loss"])
    assert task.lines(12345, train, {}) == ["step 12345  train 1.2346  val nan  100 tokens/s"]
    assert "skipped" not in task.records(4, {"loss": 1.0, "tokens_per_s": 1.0}, {"loss": 2.0})[0]


def test_each_batch_sets_the_scheduled_rate_and_draws_block_long_windows():
    cfg = _cfg(steps=10, warmup=4, lr=0.01, batch_size=3)
    task = LMTask(TEXT, cfg)
    opt = task.optimizer()
    (x, y, pos), real = task.batch(1, Runtime())
    assert real is True and pos is None and x.shape == y.shape == (3, 8)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.01 * 2 / 4] * 2)
    assert task.last[0] is x
    total, n = task.loss_sum(task.model, (x, y, None))
    assert n == 24 and total.item() > 0


def test_the_evaluation_estimate_is_eval_batches_times_the_faster_of_two_timed_losses(monkeypatch):
    import types

    readings = iter([10.0, 13.0, 20.0, 21.5])  # 3 s, then 1.5 s (the first pays its warm-up)
    monkeypatch.setattr(lm, "time", types.SimpleNamespace(perf_counter=lambda: next(readings)))
    task = LMTask(TEXT, _cfg(eval_batches=4))
    task.optimizer()
    task.batch(0, Runtime())
    task.model.train()
    assert task.eval_seconds(Runtime()) == 4 * 1.5 and task.model.training
