"""The character GPT's training task (train.lm): its optimizer decays the weight matrices only, its
log lines and records, and a context-parallel run asked of one process."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.train.lm import LMTask, LMTrainConfig, train_lm
from attnlab.train.runtime import Runtime

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "the cat sat on the mat. " * 4


def _cfg(**kw) -> LMTrainConfig:
    return LMTrainConfig(**{"steps": 1, "batch_size": 2, "block_size": 8, "dim": 8, "num_layers": 1, "num_heads": 2,
                            **kw})


def test_adamw_decays_the_weight_matrices_and_not_the_biases_or_norms():
    task = LMTask(TEXT, _cfg(lr=0.1, weight_decay=0.5))
    opt = task.optimizer()
    before = [p.detach().double().numpy().copy() for p in task.model.parameters()]
    assert any(p.dim() < 2 for p in task.model.parameters()) and any(p.dim() >= 2 for p in task.model.parameters())
    for p in task.model.parameters():
        p.grad = torch.zeros_like(p)  # Adam's own update is 0 / (0 + eps) = 0: what moves is the decay alone
    opt.step()
    for p, p0 in zip(task.model.parameters(), before):
        want = p0 * (1 - 0.1 * 0.5) if p.dim() >= 2 else p0  # decoupled decay: p ← p - lr · wd · p
        np.testing.assert_allclose(p.detach().double().numpy(), want, rtol=1e-6, atol=1e-7)


def test_the_task_prints_and_records_a_logged_interval_and_nothing_without_one():
    task = LMTask(TEXT, _cfg())
    train, valid = {"loss": 1.23456, "tokens_per_s": 12345.6}, {"loss": 2.0}
    assert task.lines(5, train, valid) == ["step     5  train 1.2346  val 2.0000  12,346 tokens/s"]
    assert task.records(5, train, valid) == [{"step": 5, "train_loss": 1.2346, "val_loss": 2.0,
                                              "tokens_per_second": 12345.6}]
    assert task.lines(5, None, valid) == [] and task.records(5, None, valid) == []


def test_context_parallel_asks_for_as_many_processes_as_it_splits_a_window_across():
    with pytest.raises(ValueError) as err:
        train_lm(TEXT, _cfg(context_parallel=2), runtime=Runtime())
    assert str(err.value) == ("context_parallel=2 splits each window across all processes: run it under torchrun "
                              "with --nproc-per-node 2; got 1 process(es)")


def test_the_held_out_text_is_the_share_the_checkpoint_says_training_left_out():
    """``lm_held_out`` splits with the run's own ``val_fraction``: 0.3 of 40 characters is the last 12
    (not the default 0.1, which would leave the block size + 1 = 5)."""
    from types import SimpleNamespace

    from attnlab.data.vocab import Vocab
    from attnlab.train.heldout import lm_held_out

    text = "abcdefghij" * 4
    vocab = Vocab.chars(text)
    model = SimpleNamespace(config=SimpleNamespace(block_size=4))
    loaded = SimpleNamespace(config={"train": {"val_fraction": 0.3}}, vocabs={"vocab": vocab}, model=model)
    assert vocab.decode(lm_held_out(loaded, text).tolist()) == text[-12:]
    loaded.config = {}  # a checkpoint without the field: the default share, at least a block and one more
    assert vocab.decode(lm_held_out(loaded, text).tolist()) == text[-5:]
