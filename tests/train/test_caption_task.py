"""The captioner's training task (train.caption): its log records and lines once per epoch, and
``train_captioner`` training on the runtime it is given."""

from __future__ import annotations

import pytest
import torch

from attnlab.models.captioner import Captioner, CaptionerConfig
from attnlab.train.caption import CaptionTask, CaptionTrainConfig, train_captioner
from attnlab.train.runtime import Runtime

pytestmark = pytest.mark.usefixtures("one_thread")


def _task() -> CaptionTask:
    g = torch.Generator().manual_seed(0)
    images = torch.rand(10, 3, 16, 16, generator=g)
    inp, tgt = torch.randint(1, 12, (10, 4), generator=g), torch.randint(1, 12, (10, 4), generator=g)
    model = Captioner(CaptionerConfig(vocab_size=12, image_size=16, widths=(4, 8), d_model=8, num_heads=2, max_len=8))
    return CaptionTask(model, images, inp, tgt, epochs=3, batch_size=4, lr=1e-2, seed=0)  # 3 steps an epoch


def test_the_task_records_and_prints_the_train_loss_with_its_epoch_and_nothing_without_one():
    task = _task()
    train = {"loss": 1.23456, "tokens_per_s": 100.0}
    assert task.records(6, train, {}) == [{"step": 6, "epoch": 2, "loss": 1.23456, "tokens_per_s": 100.0}]
    assert task.records(4, train, {"probe": "; p"}) == [{"step": 4, "epoch": 2, "loss": 1.23456, "tokens_per_s": 100.0}]
    assert task.lines(4, train, {"probe": "; p"}) == ["epoch 2/3: loss 1.235; p"]
    for nothing in (None, {}):  # an evaluation alone, without a train interval, is neither logged nor printed
        assert task.records(3, nothing, {"probe": "; p"}) == []
        assert task.lines(3, nothing, {"probe": "; p"}) == []


def test_train_captioner_trains_on_the_runtime_it_is_given():
    class Counting(Runtime):
        steps = 0

        def step(self, *args, **kwargs):
            self.steps += 1
            return super().step(*args, **kwargs)

    rt = Counting()
    cfg = CaptionTrainConfig(n_train=8, n_test=2, epochs=1, batch_size=4, d_model=8, pool=4, max_objects=1, cells=2,
                             image_size=16, widths=(4, 8))
    _, _, history, _ = train_captioner(cfg, log=None, runtime=rt)
    assert rt.steps == 2  # 8 scenes in batches of 4, one epoch
    assert len(history) == 1


def test_a_checkpoint_keeps_each_epochs_loss_and_timing_from_the_run_log():
    """The checkpoint's state names the epoch and carries the losses and timings the log recorded."""
    task = _task()
    task.optimizer()
    records = [{"step": 3, "epoch": 1, "loss": 2.5, "wall_s": 0.5, "tokens_per_s": 80.0},
               {"step": 6, "epoch": 2, "loss": 1.5, "wall_s": 0.25, "tokens_per_s": 160.0, "skipped": 1},
               {"step": 6, "event": "resumed"}]  # a record without a loss is not an epoch
    tensors, config, files = task.checkpoint(6, records)
    state = config["state"]
    assert state["epoch"] == 2 and state["history"] == [2.5, 1.5]
    assert state["timing"] == [{"wall_s": 0.5, "tokens_per_s": 80.0}, {"wall_s": 0.25, "tokens_per_s": 160.0, "skipped": 1}]
    assert set(tensors) == {"rng.batches"} and files == {}
