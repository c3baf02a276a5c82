"""The captioner's training helpers worked by hand: captions into padded decoder inputs and targets
(cut to the length limit), which cell each attention region lies in, the scores' sentence, the per-epoch
history and timing read from the run log, the finite-number check of a saved state, the epoch of each
record and line, and the loop settings of one epoch."""

from __future__ import annotations

import numpy as np
import torch

from attnlab.data.vocab import Vocab
from attnlab.train import caption as C
from attnlab.train.fit import FitConfig

V = Vocab(
    ["red", "cat", "dog"], "tokens"
)  # <pad> 0, <bos> 1, <eos> 2, <unk> 3, red 4, cat 5, dog 6


def test_captions_become_bos_led_inputs_and_eos_ended_targets_padded_with_zero():
    inp, tgt = C.encode_captions([["red", "cat"], ["dog"]], V, max_len=10)
    assert inp.dtype == tgt.dtype == torch.long
    assert inp.tolist() == [[1, 4, 5], [1, 6, 0]]
    assert tgt.tolist() == [[4, 5, 2], [6, 2, 0]]


def test_captions_longer_than_the_limit_are_cut_to_leave_room_for_eos():
    inp, tgt = C.encode_captions([["red", "cat", "dog", "red"], ["cat"]], V, max_len=3)
    assert inp.tolist() == [[1, 4, 5], [1, 5, 0]]
    assert tgt.tolist() == [[4, 5, 2], [5, 2, 0]]
    inp, _ = C.encode_captions([["red", "cat"]], V, max_len=3)  # exactly the limit: kept whole
    assert inp.tolist() == [[1, 4, 5]]


def test_region_cells_of_a_grid_in_a_coarser_grid_of_cells():
    # 4×4 regions in 2×2 cells: region centres 0.125, 0.375 → cell 0; 0.625, 0.875 → cell 1
    assert C.region_cells(4, 2).tolist() == [0, 0, 1, 1, 0, 0, 1, 1, 2, 2, 3, 3, 2, 2, 3, 3]
    # 3×3 regions in 2×2 cells: centres 1/6 → 0, 1/2 → 1 (0.5·2 = 1), 5/6 → 1
    assert C.region_cells(3, 2).tolist() == [0, 1, 1, 2, 3, 3, 2, 3, 3]
    assert C.region_cells(2, 3).tolist() == [0, 2, 6, 8]  # centres 0.25 → 0, 0.75 → 2
    assert C.region_cells(1, 1).tolist() == [0]


def test_the_scores_sentence():
    s = {
        "exact_match": 0.5,
        "attention_accuracy": 0.8125,
        "chance": 0.25,
        "attention_mass": 0.3333,
        "words": 12,
        "scenes": 4,
    }
    assert C.format_scores(s) == (
        "exact match 50.0%, attention accuracy 81.2% (chance 25.0%), attention mass in the right cell 33.3% "
        "over 12 words of 4 held-out scenes"
    )


def test_history_and_timing_come_from_the_records_with_a_loss():
    records = [
        {"step": 2, "epoch": 1, "loss": 1.5, "tokens_per_s": 10.0, "wall_s": 0.5},
        {"step": 2, "probe": "x"},
        {"step": 4, "epoch": 2, "loss": 1.0, "tokens_per_s": 12.0, "wall_s": 1.0, "skipped": 1},
    ]
    assert C.history_of(records) == [1.5, 1.0]
    assert C.timing_of(records) == [
        {"wall_s": 0.5, "tokens_per_s": 10.0},
        {"wall_s": 1.0, "tokens_per_s": 12.0, "skipped": 1},
    ]
    assert C.history_of([]) == [] and C.timing_of([]) == []


def test_a_state_is_finite_when_every_number_inside_is():
    assert C._finite({"a": [1.0, 2, {"b": (3.5, "x")}], "c": None, "d": True})
    assert not C._finite({"a": [1.0, {"b": float("nan")}]})
    assert not C._finite([float("inf")]) and not C._finite((1.0, float("-inf")))
    assert C._finite(5) and not C._finite(float("nan"))


class _Task(C.CaptionTask):
    def __init__(self):  # the parts records, lines and fit_config read
        self.per_epoch, self.epochs = 3, 4


def test_records_and_lines_name_the_epoch_a_step_ends_or_falls_in():
    t = _Task()
    train = {"loss": 1.23456, "tokens_per_s": 5.0}
    assert t.records(3, train, {}) == [
        {"step": 3, "epoch": 1, "loss": 1.23456, "tokens_per_s": 5.0}
    ]
    assert t.records(4, train, {})[0]["epoch"] == 2  # within the second epoch (a budget stopped it)
    assert t.records(6, None, {"probe": "p"}) == []
    assert t.lines(6, train, {}) == ["epoch 2/4: loss 1.235"]
    assert t.lines(6, train, {"probe": "  (cat → 'red cat')"}) == [
        "epoch 2/4: loss 1.235  (cat → 'red cat')"
    ]
    assert t.lines(6, None, {"probe": "x"}) == []


def test_one_epoch_is_the_unit_of_logging_evaluating_and_saving():
    t = _Task()
    assert t.fit_config() == FitConfig(12, 3, 3, 3, 1.0, None, "stop", "train caption")
    assert t.fit_config("skip", 5.0) == FitConfig(12, 3, 3, 3, 1.0, 5.0, "skip", "train caption")


def test_the_loss_is_summed_over_caption_tokens_and_padding_not_counted():
    logits = torch.log(
        torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]]])
    )  # (1, 2, 4)

    def net(images, inp):
        return logits, None

    tgt = torch.tensor([[3, 0]])  # one token, then padding
    total, n = C._loss_sum(net, None, None, tgt)
    assert n == 1 and abs(total.item() + np.log(0.4)) < 1e-6
    tgt = torch.tensor([[3, 2]])
    total, n = C._loss_sum(net, None, None, tgt)
    assert n == 2 and abs(total.item() - (-np.log(0.4) - np.log(0.25))) < 1e-6


def _task(seed=0):
    torch.manual_seed(0)
    images = torch.arange(5.0)[:, None]  # five "images": batches of two, three steps an epoch
    t = C.CaptionTask(
        torch.nn.Linear(1, 1),
        images,
        images.long(),
        images.long(),
        epochs=2,
        batch_size=2,
        lr=0.01,
        seed=seed,
    )
    t.optimizer()
    return t


def test_the_checkpoint_state_and_its_restore_with_the_schedules_rate_and_betas():
    from attnlab.train.runtime import Runtime

    t = _task()
    assert t.per_epoch == 3
    for step in range(4):  # into the second epoch
        t.batch(step, Runtime())
        t.opt.step()
        t.after_step(step)
    t.checkpoint_extra = ({"model": {"kind": "x"}}, {"vocab.json": "[]"})
    records = [{"step": 3, "epoch": 1, "loss": 2.0, "tokens_per_s": 4.0, "wall_s": 0.1}]
    tensors, config, files = t.checkpoint(4, records)
    state = config["state"]
    assert list(config) == ["model", "state"] and files == {"vocab.json": "[]"}
    assert list(state) == ["epoch", "history", "timing", "scheduler", "param_groups"]
    assert (
        state["epoch"] == 1
        and state["history"] == [2.0]
        and state["timing"] == [{"wall_s": 0.1, "tokens_per_s": 4.0}]
    )
    assert torch.equal(
        tensors["rng.batches"], t.epoch_rng
    )  # within an epoch: the state before its draw
    assert torch.equal(
        t.checkpoint(3, [])[0]["rng.batches"], t.gen.get_state()
    )  # at its end: the state now
    other = _task(seed=9)
    saved = {"epoch": 1, "step": 4, **{k: state[k] for k in ("scheduler", "param_groups")}}
    saved["param_groups"] = [
        {**g, "betas": list(g["betas"])} for g in saved["param_groups"]
    ]  # as JSON has it
    assert other.restore(None, tensors, {"state": saved}) == 4
    assert other.opt.param_groups[0]["lr"] == t.opt.param_groups[0]["lr"] != 0.01
    betas = other.opt.param_groups[0][
        "betas"
    ]  # one-cycle moves beta1 too: the saved one comes back, a tuple
    assert betas == t.opt.param_groups[0]["betas"] and betas[0] != 0.9 and isinstance(betas, tuple)
    assert torch.equal(other.gen.get_state(), tensors["rng.batches"])
    del saved["step"]
    assert (
        other.restore(None, tensors, {"state": saved}) == 3
    )  # an old state: the epoch's first step


def test_restore_refusals_in_full():
    t = _task()
    where = "the checkpoint's config.json: state"
    for state in (None, [1, 2], {"epoch": 1, "x": float("nan")}):
        try:
            t.restore(None, {}, {"state": state})
        except C.CheckpointError as e:
            assert (
                str(e)
                == f"{where} must be an object of finite numbers (written by fit); got {str(state)[:80]}"
            )
        else:
            raise AssertionError(state)
    long = {"epoch": 1, "history": [float("inf")] * 40}
    try:
        t.restore(None, {}, {"state": long})
    except C.CheckpointError as e:
        assert str(e).endswith("; got " + str(long)[:80]) and len(str(long)) > 80
    for state, words in (
        ({"epoch": -1}, "state.epoch must be an integer >= 0; got -1"),
        ({"epoch": 1, "step": True}, "state.step must be an integer >= 0; got True"),
    ):
        try:
            t.restore(None, {}, {"state": state})
        except ValueError as e:
            assert str(e) == f"the checkpoint's config.json: {words}"
        else:
            raise AssertionError(state)
    try:
        t.restore(None, {}, {"state": {"epoch": 1}})
    except C.CheckpointError as e:
        assert str(e) == f"{where} is not the state fit writes (KeyError: 'rng.batches')"
