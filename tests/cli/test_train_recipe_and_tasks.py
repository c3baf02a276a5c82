"""``attnlab train --recipe NAME [overrides]``: the shipped model's card recipe becomes the command line (in
either spelling, ``--recipe NAME`` and ``--recipe=NAME``), the flags given after it override it, and it
reaches the task's training with the training itself replaced by a recorder; an unknown or missing name is
one exact line, exit 2; ``train`` dispatches to its three tasks and needs one."""

from __future__ import annotations

import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import attnlab.train.caption as caption_training
import attnlab.train.lm as lm
from attnlab.cli import main
from attnlab.train.caption import CaptionTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def recorded(monkeypatch):
    seen = {}

    def fake_lm(text, cfg, out, **kwargs):
        seen.update(task="lm", cfg=cfg, text=text)
        return (
            torch.nn.Linear(1, 1),
            None,
            types.SimpleNamespace(steps=1, seconds=1.0, tokens_per_second=1.0, val_loss=1.0),
        )

    def fake_caption(cfg, **kwargs):
        seen.update(task="caption", cfg=cfg)
        return None, None, [1.0], {"scores": {}, "test": None, "records": []}

    monkeypatch.setattr(lm, "train_lm", fake_lm)
    monkeypatch.setattr(caption_training, "train_captioner", fake_caption)
    monkeypatch.setattr(caption_training, "save_captioner", lambda out, *a, **k: Path(out))
    return seen


def test_the_caption_recipe_with_an_override(tmp_path, recorded, capsys):
    # card recipe: train caption --data scenes --epochs 20 --threads 1 --seed 0
    assert (
        main(
            [
                "train",
                "--recipe",
                "caption",
                "--out",
                str(tmp_path / "c"),
                "--epochs",
                "2",
                "--seed",
                "4",
            ]
        )
        == 0
    )
    assert recorded["task"] == "caption"
    assert recorded["cfg"] == replace(CaptionTrainConfig(), data="scenes", epochs=2, seed=4)


def test_the_gpt_recipe_in_the_equals_spelling(tmp_path, recorded, capsys):
    text = tmp_path / "t.txt"
    text.write_text("abc" * 50, encoding="utf-8")
    assert (
        main(
            [
                "train",
                "--recipe=char-gpt",
                "--text",
                str(text),
                "--out",
                str(tmp_path / "lm"),
                "--steps",
                "3",
            ]
        )
        == 0
    )
    assert recorded["task"] == "lm" and recorded["text"] == "abc" * 50
    assert recorded["cfg"] == lm.LMTrainConfig(
        dim=128,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        positional="rope",
        block_size=128,
        batch_size=32,
        lr=0.003,
        steps=3,
        eval_every=500,
        seed=0,
    )


@pytest.mark.parametrize(
    "argv, name",
    [
        (["--recipe", "no-such-model"], "'no-such-model'"),
        (["--recipe=gpt2"], "'gpt2'"),
        (["--out", "x", "--recipe"], "''"),
    ],
)
def test_an_unknown_or_missing_recipe_is_one_line(recorded, capsys, argv, name):
    assert main(["train", *argv]) == 2
    assert capsys.readouterr().err == (
        "attnlab train: error: --recipe needs a shipped model's name (de-en, zh-en-numbers, char-gpt, caption); "
        f"got {name}\n"
    )
    assert recorded == {}


def test_train_needs_one_of_its_three_tasks(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["train"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        "attnlab train: error: the following arguments are required: TASK (see attnlab train --help)\n"
    )
    with pytest.raises(SystemExit):
        main(["train", "vision"])
    err = capsys.readouterr().err  # argparse quotes the choices from Python 3.12.8 on
    assert err.replace("'", "").endswith(
        "invalid choice: vision (choose from seq2seq, lm, caption) (see attnlab train --help)\n"
    )
