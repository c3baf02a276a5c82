"""``attnlab train lm``, with the training replaced by a recorder: each model and training flag reaches
``LMTrainConfig`` (an unset flag keeps the config's default), the text file and its record reach the run,
the lines printed before and after (characters and distinct characters, parameters, steps, seconds,
tokens per second and validation loss formatted), and a missing text file refused with one line."""

from __future__ import annotations

import types

import pytest
import torch

import attnlab.train.lm as lm
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def trained(monkeypatch):
    seen = {}

    def fake_train_lm(text, cfg, out, **kwargs):
        seen.update(text=text, cfg=cfg, out=out, **kwargs)
        model = torch.nn.Linear(40, 30)  # 40 * 30 + 30 = 1,230 parameters
        result = types.SimpleNamespace(
            steps=7, seconds=12.345, tokens_per_second=12345.6, val_loss=1.234567
        )
        return model, None, result

    monkeypatch.setattr(lm, "train_lm", fake_train_lm)
    return seen


def test_the_flags_reach_the_config_and_the_lines_are_printed(tmp_path, trained, capsys):
    text = tmp_path / "t.txt"
    text.write_text("abcab\nhé" * 300, encoding="utf-8")
    out = tmp_path / "run"
    argv = [
        "train",
        "lm",
        "--text",
        str(text),
        "--out",
        str(out),
        "--steps",
        "5",
        "--num-heads",
        "3",
        "--dim",
        "24",
        "--num-layers",
        "1",
        "--seed",
        "9",
        "--block-size",
        "16",
        "--lr",
        "0.01",
        "--max-seconds",
        "2.5",
    ]
    assert main(argv) == 0
    assert trained["cfg"] == lm.LMTrainConfig(
        steps=5, num_heads=3, dim=24, num_layers=1, seed=9, block_size=16, lr=0.01, max_seconds=2.5
    )
    assert trained["text"] == "abcab\nhé" * 300 and trained["out"] == str(out)
    assert trained["data"] == {"name": "text", "path": str(text.resolve())}
    assert trained["resume"] is False and trained["progress"] is True and trained["log"] is print
    assert capsys.readouterr().out.splitlines() == [
        "text: 2,400 characters, 6 distinct",
        "1,230 parameters; 7 steps in 12.3 s; 12,346 tokens/s; val loss 1.2346",
        f"checkpoint: {out}",
    ]


def test_unset_flags_keep_the_config_defaults(tmp_path, trained):
    text = tmp_path / "t.txt"
    text.write_text("xyz" * 100, encoding="utf-8")
    assert main(["train", "lm", "--text", str(text), "--out", str(tmp_path / "run")]) == 0
    assert trained["cfg"] == lm.LMTrainConfig()
    assert trained["cfg"].steps == 300 and trained["cfg"].num_heads == 4  # the documented defaults


def test_a_missing_text_file_is_refused(tmp_path, trained, capsys):
    assert (
        main(["train", "lm", "--text", str(tmp_path / "none.txt"), "--out", str(tmp_path / "run")])
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"attnlab train lm: error: no text file at {tmp_path / 'none.txt'}\n"
    )
    assert trained == {}
