"""The RoPE-scaling experiment's parts: the scaling each method hands to ``RotaryEmbedding``, the validation loss
over consecutive windows (against cross-entropy summed here with float64 NumPy), the training set-up each
positional model gets, the records of a run (rounded losses, the training's time and steps) and its refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnlab.experiments.rope_scaling as rs
from attnlab.experiments.rope_scaling import RopeScalingConfig, _scaling, _val_loss
from attnlab.models.gpt import GPT, GPTConfig
from attnlab.train.lm import LMTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "abcdefghij klmnop, qrstuv wxyz. " * 20


def test_the_scaling_of_each_method():
    cfg = RopeScalingConfig(block_size=32, factor=3.0)
    assert _scaling("rope", cfg, 8) is None
    for m in ("linear", "ntk", "dynamic", "yarn", "llama3"):
        assert _scaling(m, cfg, 8) == {"type": m, "factor": 3.0, "original_max_position": 32}
    lr = _scaling(
        "longrope", cfg, 10
    )  # 5 frequencies: short factors 1, long ones 1 … 3 in equal steps
    assert lr["type"] == "longrope" and lr["factor"] == 3.0 and lr["original_max_position"] == 32
    assert lr["short_factor"] == [1.0] * 5
    assert lr["long_factor"] == pytest.approx([1.0, 1.5, 2.0, 2.5, 3.0])
    # two frequencies: the ends of the ramp; one frequency: no ramp, no division by zero
    assert _scaling("longrope", cfg, 4)["long_factor"] == [1.0, 3.0]
    assert _scaling("longrope", cfg, 2)["long_factor"] == [1.0]


class _Bigram(torch.nn.Module):
    """logits[t] = table[token t]: a model whose loss is computed here by hand."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.calls = []

    def forward(self, x):
        self.calls.append(tuple(x.shape))
        return self.table[x]


def _ce(table, ids, n, count):
    logp = table.double().numpy() - np.log(np.exp(table.double().numpy()).sum(-1, keepdims=True))
    total = sum(-logp[ids[i * n + t], ids[i * n + t + 1]] for i in range(count) for t in range(n))
    return total / (count * n)


def test_the_validation_loss_is_the_mean_over_consecutive_windows():
    torch.manual_seed(0)
    table = torch.randn(6, 6)
    ids = torch.randint(6, (50,))
    cfg = RopeScalingConfig(eval_tokens=20, eval_batch=2)
    model = _Bigram(table)
    loss, count = _val_loss(model, ids, 4, cfg)  # 20 // 4 = 5 windows of 5 tokens, two per pass
    assert count == 5 and model.calls == [(2, 4), (2, 4), (1, 4)]
    assert loss == pytest.approx(_ce(table, ids.numpy(), 4, 5), rel=1e-6)
    # fewer windows than eval_tokens asks for: as many as the text holds ((50 − 1) // 8 = 6)
    loss, count = _val_loss(
        _Bigram(table), ids, 8, RopeScalingConfig(eval_tokens=1000, eval_batch=8)
    )
    assert count == 6 and loss == pytest.approx(_ce(table, ids.numpy(), 8, 6), rel=1e-6)
    # eval_tokens below one window still takes one
    assert _val_loss(_Bigram(table), ids, 8, RopeScalingConfig(eval_tokens=3))[1] == 1
    with pytest.raises(ValueError) as e:
        _val_loss(_Bigram(table), ids[:8], 8, cfg)
    assert str(e.value) == "the validation text (8 tokens) is shorter than one window of 9"


def test_a_run_trains_each_positional_model_once_and_records_rounded_losses(
    tmp_path, monkeypatch, capsys
):
    trained = []

    def fake_train_lm(text, cfg, log=None):
        trained.append((cfg, log))
        from attnlab.data.vocab import Vocab

        vocab = Vocab.chars(text)
        torch.manual_seed(0)
        model = GPT(
            GPTConfig(
                vocab_size=len(vocab),
                block_size=cfg.block_size,
                dim=cfg.dim,
                num_layers=cfg.num_layers,
                num_heads=cfg.num_heads,
                positional=cfg.positional,
            )
        )
        return (
            model,
            vocab,
            SimpleNamespace(val_loss=1.5 if cfg.positional == "rope" else 1.25, steps=cfg.steps),
        )

    monkeypatch.setattr(rs, "train_lm", fake_train_lm)
    cfg = RopeScalingConfig.quick(
        methods=("rope", "linear", "alibi"),
        lengths=(8, 16),
        block_size=8,
        steps=40,
        dim=16,
        eval_tokens=32,
    )
    res = rs.run(cfg, tmp_path, text=TEXT, progress=True)
    want = LMTrainConfig(
        steps=40,
        batch_size=8,
        block_size=8,
        dim=16,
        num_layers=1,
        num_heads=2,
        lr=3e-3,
        eval_every=0,
        eval_batches=2,
        seed=0,
        warmup=4,
    )  # warm-up: a tenth of the steps, 1 … 20
    assert [c.positional for c, _ in trained] == ["alibi", "rope"]
    for c, log in trained:
        assert c == LMTrainConfig(**{**want.__dict__, "positional": c.positional}) and log is print
    assert list(res) == ["config", "methods", "train"]
    assert res["train"]["rope"]["val_loss"] == 1.5 and res["train"]["alibi"]["steps"] == 40
    assert res["train"]["rope"]["seconds"] == round(res["train"]["rope"]["seconds"], 1)
    assert list(res["methods"]) == ["rope", "linear", "alibi"]
    for row in res["methods"].values():
        assert list(row) == ["8", "16"] and all(v == round(v, 4) and v > 0 for v in row.values())
    out = capsys.readouterr().out.splitlines()
    assert (
        len(out) == 6
        and out[0].startswith("    rope  n=    8  val loss ")
        and out[0].endswith(" windows)")
    )
    assert out[3].startswith("  linear  n=   16  val loss ") and "(2 windows)" in out[3]
    assert res["config"]["lengths"] == [8, 16]  # the JSON form, as written
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8")) == res
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".attnlab-files",
        "results.json",
        "rope_scaling.png",
        "table.md",
    ]


class _Stop(Exception):
    pass


@pytest.mark.parametrize("steps, warmup", [(5, 1), (100, 10), (300, 20)])
def test_the_warmup_is_a_tenth_of_the_steps_between_1_and_20(monkeypatch, steps, warmup):
    seen = []

    def stop(text, cfg, log=None):
        seen.append((cfg, log))
        raise _Stop

    monkeypatch.setattr(rs, "train_lm", stop)
    with pytest.raises(_Stop):
        rs.run(
            RopeScalingConfig.quick(steps=steps, methods=("alibi",), lengths=(8,), block_size=8),
            text=TEXT,
        )
    assert seen[0][0].warmup == warmup and seen[0][0].positional == "alibi" and seen[0][1] is None


def test_a_text_too_short_for_the_longest_length_is_refused():
    cfg = RopeScalingConfig.quick(lengths=(8, 500), block_size=8)
    with pytest.raises(ValueError) as e:
        rs.run(cfg, text=TEXT)
    assert str(e.value) == (
        "the validation text (64 characters) is shorter than the longest length 500 + 1"
    )
