"""Validation of a translation model (train.loop.validate) on a model whose next-token probabilities
are a bigram table written here: the teacher-forced loss summed over every target token (EOS
included, padding not) and divided by their count, greedy exact match on the first ``valid_decode``
sentences, the decoding guard, the training mode put back; and the translation task's parts."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch

from attnlab.data.batching import collate
from attnlab.data.vocab import BOS, EOS
from attnlab.train import loop
from attnlab.train.checkpoint import CheckpointError, save_checkpoint
from attnlab.train.decode import greedy
from attnlab.train.loop import Seq2SeqTask, TrainConfig, loss_on, loss_sum_on, validate
from attnlab.train.runtime import Runtime

A, B = 4, 5
P = np.array(
    [
        [0.1, 0.1, 0.2, 0.2, 0.2, 0.2],  # after PAD (never read)
        [0.02, 0.02, 0.1, 0.06, 0.6, 0.2],  # after BOS: A is the most probable
        [0.1, 0.1, 0.4, 0.1, 0.1, 0.2],  # after EOS
        [0.1, 0.1, 0.2, 0.2, 0.2, 0.2],  # after UNK
        [0.05, 0.05, 0.5, 0.1, 0.1, 0.2],  # after A: EOS
        [0.05, 0.05, 0.3, 0.1, 0.25, 0.25],  # after B: EOS
    ]
)


class Bigram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(np.log(P), dtype=torch.float32))

    def forward(self, src, src_mask, tgt_in):
        return self.table[tgt_in]

    def start(self, src, src_mask):
        return {}, {}

    def step(self, memory, state, y):
        return self.table[y], state, None


# greedy writes A then EOS whatever the source: only a target [A] matches
EXAMPLES = [([4, 5], [A]), ([5], [B]), ([4, 4, 4], [A, B]), ([5, 4], [A]), ([4], [B, B, A])]


def _nats(examples):
    total, n = 0.0, 0
    for _, t in examples:
        for prev, nxt in zip([BOS, *t], [*t, EOS]):
            total -= math.log(P[prev, nxt])
            n += 1
    return total, n


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_the_loss_is_summed_over_every_target_token_then_divided_once(batch_size):
    total, n = _nats(EXAMPLES)
    assert n == 2 + 2 + 3 + 2 + 4
    cfg = TrainConfig(batch_size=batch_size, valid_decode=3)
    model = Bigram()
    out = validate(model, EXAMPLES, cfg)
    assert list(out) == ["loss", "exact"]
    assert out["loss"] == pytest.approx(total / n, rel=1e-6)
    assert out["exact"] == pytest.approx(100 / 3)  # of the first three, the first matches
    assert model.training  # put back as it was
    model.eval()
    assert validate(model, EXAMPLES, TrainConfig(valid_decode=5))["exact"] == pytest.approx(40.0)
    assert not model.training


def test_the_defaults_decode_two_hundred_sentences_and_nothing_without_a_step_interface():
    cfg = TrainConfig()
    assert (cfg.valid_decode, cfg.max_len) == (200, 200)
    out = validate(Bigram(), EXAMPLES * 50, cfg)  # 250 sentences, the first 200 decoded
    assert out["exact"] == pytest.approx(100 * 80 / 200)

    class NoStep(torch.nn.Module):  # teacher forcing only
        def __init__(self):
            super().__init__()
            self.inner = Bigram()

        def forward(self, *args):
            return self.inner(*args)

    no_step = NoStep()
    assert list(validate(no_step, EXAMPLES, cfg)) == ["loss"]
    assert list(validate(Bigram(), EXAMPLES, TrainConfig(valid_decode=0))) == ["loss"]
    assert validate(Bigram(), [], cfg) == {"loss": 0.0}
    # an empty target: one token (EOS) after BOS, probability 0.1, no greedy match (A comes first)
    one = validate(Bigram(), [([4], [])], cfg)
    assert one["loss"] == pytest.approx(-math.log(0.1), rel=1e-6) and one["exact"] == 0.0


def test_the_decoder_is_guarded_by_the_shorter_of_max_len_and_the_references_length():
    seen = []

    def decode(model, src, mask, *, max_len):
        seen.append((src.shape[0], max_len))
        return greedy(model, src, mask, max_len=max_len)

    validate(Bigram(), EXAMPLES, TrainConfig(batch_size=2, valid_decode=5), decode=decode)
    # batches of the first five in order: targets of lengths (1, 1), (2, 1), (3): 2·longest + 10
    assert seen == [(2, 12), (2, 14), (1, 16)]
    seen.clear()
    validate(
        Bigram(), EXAMPLES, TrainConfig(batch_size=2, valid_decode=5, max_len=13), decode=decode
    )
    assert seen == [(2, 12), (2, 13), (1, 13)]


def test_loss_on_is_the_mean_and_loss_sum_on_the_sum():
    batch = collate(EXAMPLES[:2])
    total, n = _nats(EXAMPLES[:2])
    s, k = loss_sum_on(Bigram(), batch)
    m, k2 = loss_on(Bigram(), batch)
    assert k == k2 == n == 4 and s.item() == pytest.approx(total, rel=1e-6)
    assert m.item() == pytest.approx(total / n, rel=1e-6)


def test_the_validation_estimate_is_one_batch_times_the_batches(monkeypatch):
    ticks = iter(range(1, 1000))
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) * 0.5))
    cfg = TrainConfig(batch_size=2)
    assert (
        loop._validation_seconds(Bigram(), EXAMPLES, cfg, Runtime()) == 0.5 * 3
    )  # ⌈5 / 2⌉ batches
    task = Seq2SeqTask(Bigram(), EXAMPLES, EXAMPLES, cfg)
    assert task.eval_seconds(Runtime()) == 0.5 * 3
    bare = Seq2SeqTask(Bigram(), EXAMPLES, [], cfg)
    assert bare.eval_seconds(Runtime()) == 0.0 and bare.evaluate(Runtime()) == {}


def test_the_task_saves_its_settings_extras_and_files_and_needs_them_back(tmp_path):
    cfg = TrainConfig(steps=9, batch_size=2)
    task = Seq2SeqTask(
        Bigram(),
        EXAMPLES,
        EXAMPLES,
        cfg,
        extra={"data": {"name": "x"}},
        files={"src_vocab.json": "[]"},
    )
    tensors, config, files = task.checkpoint(3, [])
    assert tensors == {} and files == {"src_vocab.json": "[]"}
    assert list(config) == ["train", "data"] and config["data"] == {"name": "x"}
    assert (
        config["train"]["steps"] == 9
        and config["train"]["batch_size"] == 2
        and config["train"]["lr"] == 2e-3
    )
    assert task.evaluate(Runtime())["loss"] == pytest.approx(_nats(EXAMPLES)[0] / 13, rel=1e-6)
    assert (
        isinstance(task.optimizer(), torch.optim.Adam)
        and task.optimizer().param_groups[0]["lr"] == 2e-3
    )
    d = save_checkpoint(tmp_path / "c", {"w": torch.zeros(1)}, {"state": {"step": 4}})
    with pytest.raises(CheckpointError) as e:
        task.restore(d, {}, {"state": {"step": 4}})
    assert str(e.value) == f"checkpoint {d} is missing src_vocab.json"
    d = save_checkpoint(tmp_path / "v", {"w": torch.zeros(1)}, {}, {"src_vocab.json": "[]"})
    assert task.restore(d, {}, {"state": {"step": 4}}) == 4
    # five examples in batches of two: three batches an epoch; step 3 starts the second epoch's order
    assert task.n_batches == 3
    b0 = task.batch(0, Runtime())
    assert b0[1] is True and task.order_epoch == 0
    task.batch(3, Runtime())
    assert task.order_epoch == 1


def test_settings_from_a_checkpoint_keep_the_known_fields_and_say_where_a_bad_one_is():
    from attnlab.train.loop import train_config_from

    cfg = train_config_from({"steps": 7, "lr": 0.5, "unknown": 1, "max_seconds": None})
    assert cfg == TrainConfig(steps=7, lr=0.5)
    with pytest.raises(CheckpointError) as e:
        train_config_from([1])
    assert str(e.value) == "config.json: 'train' must be an object of settings; got list"
    with pytest.raises(CheckpointError) as e:
        train_config_from({"batch_size": 0}, "r/config.json")
    assert str(e.value).startswith("r/config.json: train.batch_size ")
