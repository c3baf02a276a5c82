"""The three training configs' documented defaults and refusal texts, the character GPT's learning
rate (linear warm-up, cosine decay to a tenth) against its formula, its split and windows, the
loop's records and progress lines of each task, and the wall-time budget's arithmetic."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
import torch

from attnlab.train import lm
from attnlab.train.caption import CaptionTrainConfig
from attnlab.train.fit import FitConfig, Step, TrainResult
from attnlab.train.lm import LMTrainConfig
from attnlab.train.loop import Seq2SeqTask, TrainConfig, valid_words
from attnlab.train.runtime import Deadline, first_step_line


def test_the_translation_config_defaults_are_the_documented_ones():
    assert asdict(TrainConfig()) == {
        "steps": 3000,
        "batch_size": 64,
        "lr": 2e-3,
        "clip": 1.0,
        "seed": 0,
        "eval_every": 500,
        "save_every": 500,
        "log_every": 20,
        "valid_decode": 200,
        "max_len": 200,
        "on_nonfinite": "stop",
        "max_seconds": None,
    }


@pytest.mark.parametrize("field", ["steps", "batch_size", "log_every"])
def test_the_translation_config_refuses_a_count_below_one(field):
    with pytest.raises(ValueError) as err:
        TrainConfig(**{field: 0})
    assert f"{field} must be >= 1; got 0" in str(err.value)
    TrainConfig(**{field: 1})  # one is enough
    assert TrainConfig(steps=1, batch_size=1, log_every=1, lr=1e-9).lr == 1e-9


def test_the_translation_config_refuses_a_learning_rate_of_zero_and_an_unknown_mode():
    with pytest.raises(ValueError, match="lr must be > 0"):
        TrainConfig(lr=0.0)
    with pytest.raises(ValueError, match="on_nonfinite"):
        TrainConfig(on_nonfinite="ignore")
    TrainConfig(on_nonfinite="skip")


def test_the_lm_config_defaults_are_the_documented_ones():
    assert asdict(LMTrainConfig()) == {
        "steps": 300,
        "batch_size": 32,
        "block_size": 128,
        "dim": 128,
        "num_layers": 4,
        "num_heads": 4,
        "num_kv_heads": None,
        "positional": "learned",
        "dropout": 0.0,
        "lr": 3e-3,
        "weight_decay": 0.1,
        "warmup": 20,
        "eval_every": 100,
        "eval_batches": 10,
        "val_fraction": 0.1,
        "seed": 0,
        "max_seconds": None,
        "save_every": 0,
        "on_nonfinite": "stop",
        "context_parallel": 1,
        "cp_mode": "ring",
    }
    assert (
        LMTrainConfig().cp_layout == "zigzag"
        and LMTrainConfig(positional="rope").cp_layout == "contiguous"
    )


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"steps": 0}, "steps must be >= 1; got 0"),
        ({"batch_size": 0}, "batch_size must be >= 1; got 0"),
        ({"block_size": 1}, "steps, batch_size must be >= 1 and block_size >= 2; got 300, 32, 1"),
        ({"val_fraction": 0.0}, "val_fraction must be > 0; got 0.0"),
        ({"val_fraction": 1.0}, "val_fraction must be < 1; got 1.0"),
        ({"dim": 0}, "dim must be >= 1; got 0"),
        ({"num_layers": 0}, "num_layers must be >= 1; got 0"),
        ({"num_heads": 0}, "num_heads must be >= 1; got 0"),
        ({"eval_batches": 0}, "eval_batches must be >= 1; got 0"),
        ({"warmup": -1}, "warmup must be >= 0; got -1"),
        ({"eval_every": -1}, "eval_every must be >= 0; got -1"),
        ({"save_every": -1}, "save_every must be >= 0; got -1"),
        ({"num_kv_heads": 0}, "num_kv_heads must be >= 1; got 0"),
        ({"dropout": 1.0}, "dropout must be in [0, 1); got 1.0"),
        ({"lr": 0.0}, "lr must be > 0; got 0.0"),
        ({"weight_decay": -0.5}, "weight_decay must be >= 0; got -0.5"),
        ({"max_seconds": 0.0}, "max_seconds must be > 0; got 0.0"),
        ({"cp_mode": "tree"}, "cp_mode must be 'ring' or 'ulysses'; got 'tree'"),
        (
            {"context_parallel": 3, "block_size": 10},
            "block_size=10 does not split across context_parallel=3 "
            "processes: it must be divisible by 6",
        ),
        (
            {"context_parallel": 5, "block_size": 12, "positional": "rope"},
            "it must be divisible by 5",
        ),
    ],
)
def test_the_lm_config_refuses_each_setting_out_of_range_in_words(kw, words):
    with pytest.raises(ValueError) as err:
        LMTrainConfig(**kw)
    assert words in str(err.value)


def test_the_lm_config_accepts_each_edge():
    LMTrainConfig(
        steps=1,
        batch_size=1,
        block_size=2,
        warmup=0,
        eval_every=0,
        save_every=0,
        dropout=0.0,
        weight_decay=0.0,
        num_kv_heads=1,
        val_fraction=0.5,
        max_seconds=0.5,
    )
    LMTrainConfig(context_parallel=3, block_size=12, positional="rope")  # rope: 3 parts, not 6
    LMTrainConfig(context_parallel=2, block_size=12)  # zigzag: 4 parts


def lr_formula(step: int, lr: float, warmup: int, steps: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then a cosine from ``lr`` down to ``lr / 10``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * p)))


def test_the_lm_learning_rate_warms_up_then_decays_to_a_tenth():
    cfg = LMTrainConfig(steps=14, warmup=4, lr=2.0)
    got = [lm._lr(s, cfg) for s in range(17)]
    want = [lr_formula(s, 2.0, 4, 14) for s in range(17)]
    assert got == pytest.approx(want, rel=1e-12)
    # the edges written out: a quarter, the peak, the peak again at the decay's start, half-way, a tenth
    assert (
        got[0] == pytest.approx(0.5)
        and got[3] == pytest.approx(2.0)
        and got[4] == pytest.approx(2.0)
    )
    assert (
        got[9] == pytest.approx(2.0 * 0.55)
        and got[14] == pytest.approx(0.2)
        and got[16] == pytest.approx(0.2)
    )
    # no warm-up: the full rate at once; as many warm-up steps as steps: no division by zero
    assert lm._lr(0, LMTrainConfig(steps=10, warmup=0, lr=1.0)) == pytest.approx(1.0)
    assert lm._lr(10, LMTrainConfig(steps=10, warmup=10, lr=1.0)) == pytest.approx(1.0)
    assert lm._lr(11, LMTrainConfig(steps=10, warmup=10, lr=1.0)) == pytest.approx(
        0.1 + 0.45 * (1 + math.cos(math.pi))
    )


def test_the_optimizer_steps_at_the_scheduled_rate_with_the_documented_betas():
    text = "abcdefghij" * 6
    task = lm.LMTask(
        text,
        LMTrainConfig(
            steps=8, warmup=3, lr=0.3, batch_size=2, block_size=4, dim=8, num_layers=1, num_heads=2
        ),
    )
    opt = task.optimizer()
    assert isinstance(opt, torch.optim.AdamW) and [g["weight_decay"] for g in opt.param_groups] == [
        0.1,
        0.0,
    ]
    assert all(g["betas"] == (0.9, 0.95) for g in opt.param_groups)
    from attnlab.train.runtime import Runtime

    for step in (0, 2, 3, 5):
        task.batch(step, Runtime())
        assert [g["lr"] for g in opt.param_groups] == pytest.approx(
            [lr_formula(step, 0.3, 3, 8)] * 2
        )


def test_the_held_out_tail_is_the_share_asked_and_at_least_a_window_and_one():
    ids = torch.arange(100)
    train, val = lm.split(ids, 0.2, 4)
    assert val.tolist() == list(range(80, 100)) and train.tolist() == list(range(80))
    train, val = lm.split(ids, 0.01, 9)  # 1 character asked; a window of 9 and its next one needed
    assert val.tolist() == list(range(90, 100))
    lm.split(torch.arange(20), 0.1, 9)  # 10 + 10: just enough
    with pytest.raises(ValueError) as err:
        lm.split(torch.arange(19), 0.1, 9)
    assert (
        str(err.value)
        == "the text (19 characters) is too short for block_size=9: need at least 20 characters"
    )


def test_windows_are_block_long_with_targets_shifted_by_one():
    ids = torch.arange(10) * 10
    x, y = lm.batch(ids, 64, 3, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (64, 3)
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y[:, 0], x[:, 0] + 10)
    starts = (x[:, 0] // 10).tolist()
    assert (
        min(starts) == 0 and max(starts) == 6
    )  # every start 0 … len - block - 1 is reached, none beyond


def test_the_fit_config_defaults_and_when_each_interval_is_due():
    c = FitConfig(steps=5)
    assert (
        c.log_every,
        c.eval_every,
        c.save_every,
        c.clip,
        c.max_seconds,
        c.on_nonfinite,
        c.desc,
    ) == (0, 0, 0, 1.0, None, "stop", "train")
    assert [c.due(3, s, False) for s in range(1, 7)] == [False, False, True, False, False, True]
    assert c.due(0, 3, False) is False and c.due(0, 3, True) is True and c.due(3, 4, True) is True
    for name in ("log_every", "eval_every"):
        with pytest.raises(ValueError) as err:
            FitConfig(steps=3, **{name: -1})
        assert str(err.value) == f"{name} must be >= 0; got -1"
    with pytest.raises(ValueError) as err:
        FitConfig(steps=0)
    assert str(err.value) == "steps must be >= 1; got 0"
    with pytest.raises(ValueError) as err:
        FitConfig(steps=3, max_seconds=-1.0)
    assert str(err.value) == "max_seconds must be > 0; got -1.0"
    FitConfig(steps=1, max_seconds=0.01)


def test_the_translation_task_hands_its_settings_to_the_loop_in_order():
    cfg = TrainConfig(
        steps=7,
        log_every=2,
        eval_every=3,
        save_every=4,
        clip=0.5,
        max_seconds=9.0,
        on_nonfinite="skip",
    )
    task = Seq2SeqTask(torch.nn.Linear(1, 1), [([4], [5])], [], cfg)
    assert task.fit_config("exp") == FitConfig(7, 2, 3, 4, 0.5, 9.0, "skip", "exp")
    lmt = lm.LMTask(
        "abcdefghij" * 6,
        LMTrainConfig(
            steps=6,
            eval_every=2,
            save_every=3,
            max_seconds=5.0,
            on_nonfinite="skip",
            batch_size=2,
            block_size=4,
            dim=8,
            num_layers=1,
            num_heads=2,
        ),
    )
    assert lmt.fit_config() == FitConfig(6, 2, 2, 3, 1.0, 5.0, "skip", "train lm")
    with pytest.raises(ValueError) as err:
        Seq2SeqTask(torch.nn.Linear(1, 1), [], [], cfg)
    assert str(err.value) == "no training examples"


def test_the_translation_task_records_and_lines():
    task = Seq2SeqTask(torch.nn.Linear(1, 1), [([4], [5])], [], TrainConfig(steps=40))
    train, valid = {"loss": 2.34567, "tokens_per_s": 12345.5}, {"loss": 1.5, "exact": 12.5}
    assert task.records(20, train, valid) == [
        {"step": 20, "loss": 2.34567, "tokens_per_s": 12345.5},
        {"step": 20, "valid_loss": 1.5, "valid_exact": 12.5},
    ]
    assert task.records(20, None, {}) == [] and task.records(20, train, {}) == [
        task.records(20, train, valid)[0]
    ]
    assert task.lines(20, train, valid) == [
        "step 20/40  loss 2.3457  12,346 tok/s",
        "step 20: valid loss 1.500, exact match 12.5%",
    ]
    assert task.lines(20, None, {}) == [] and task.lines(20, None, {"loss": 1.0}) == [
        "step 20: valid loss 1.000"
    ]


def test_validation_in_words():
    assert valid_words({"loss": 6.6044, "exact": 0.0}) == "valid loss 6.604, exact match 0.0%"
    assert valid_words({"loss": 0.25}) == "valid loss 0.250"
    assert valid_words({}) == "not validated"
    assert valid_words({"exact": 33.333}) == "not validated, exact match 33.3%"


def test_the_default_task_records_and_line_and_the_result_aliases():
    s = Step()
    assert s.records(3, {"loss": 0.5, "tokens_per_s": 2.0}, {}) == [
        {"step": 3, "loss": 0.5, "tokens_per_s": 2.0}
    ]
    assert s.records(3, None, {"loss": 1.0}) == [] and s.lines(3, None, {"loss": 1.0}) == []
    assert s.lines(3, {"loss": 0.123456}, {}) == ["step 3  loss 0.1235"]
    assert (
        s.evaluate(None) == {}
        and s.eval_seconds(None) == 0.0
        and s.checkpoint(3, []) == ({}, {}, {})
    )
    r = TrainResult(7, 0.5, {"loss": 0.25}, 100.0)
    assert (r.steps, r.val_loss, r.tokens_per_second, r.seconds, r.history) == (
        7,
        0.25,
        100.0,
        0.0,
        [],
    )
    assert math.isnan(TrainResult(1, 0.5).val_loss) and TrainResult(1, 0.5).tokens_per_s == 0.0


def test_the_first_step_line():
    assert first_step_line(1, 300, 4.56789, 2.345) == "step 1/300  loss 4.5679  (first step 2.3 s)"


def test_the_budget_stops_while_one_more_step_and_the_closing_work_fit(monkeypatch):
    import attnlab.train.runtime as runtime

    now = [100.0]
    monkeypatch.setattr(runtime.time, "perf_counter", lambda: now[0])
    d = Deadline(10.0, start=95.0)  # 5 s spent
    assert d.due(4.0) is False  # 5 + 4 = 9 <= 10
    assert d.due(5.0) is False  # exactly 10: still fits
    assert d.due(5.5) is True
    d.took("eval", 1.0)
    d.took("save", 0.5)
    d.took("eval", 2.0)  # the latest evaluation counts, not the sum of all
    assert d.due(2.5) is False and d.due(3.01) is True  # 5 + 2.5 + 2 + 0.5 = 10
    assert Deadline(None, 0.0).due(1e9) is False


def test_the_caption_config_defaults_and_what_resolving_fills_in():
    c = CaptionTrainConfig()
    assert asdict(c) == {
        "data": "scenes",
        "lang": "en",
        "limit": None,
        "n_train": 4000,
        "n_test": 500,
        "cells": 3,
        "max_objects": 3,
        "pool": 16,
        "image_size": None,
        "widths": None,
        "d_model": 64,
        "num_heads": 2,
        "decoder": "gru",
        "layers": 2,
        "epochs": 20,
        "batch_size": 32,
        "lr": 1e-2,
        "seed": 0,
        "on_nonfinite": "stop",
        "max_seconds": None,
    }
    r = c.resolved()
    assert (r.image_size, r.widths) == (48, (16, 32, 64))
    e = CaptionTrainConfig(data="emoji").resolved()
    assert (e.image_size, e.widths) == (32, (32, 64, 64))
    assert CaptionTrainConfig(data="emoji", image_size=40, widths=[8, 8]).resolved().widths == (
        8,
        8,
    )
    with pytest.raises(ValueError) as err:
        CaptionTrainConfig(data="faces").resolved()
    assert str(err.value) == "data must be one of scenes, emoji; got 'faces'"
    with pytest.raises(ValueError) as err:
        CaptionTrainConfig(max_seconds=0.0)
    assert str(err.value) == "max_seconds must be > 0; got 0.0"
    sc = CaptionTrainConfig(cells=4, max_objects=2, pool=5, lang="fr").scene_config()
    assert (sc.canvas, sc.cells, sc.max_objects, sc.pool, sc.lang) == (48, 4, 2, 5, "fr")
    assert CaptionTrainConfig(image_size=64).scene_config().canvas == 64
