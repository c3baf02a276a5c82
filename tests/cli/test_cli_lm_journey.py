"""The language-model journey of docs/transformer.md end to end: train lm → generate --attention-out → view, and
interpret rollout / flow on what generate wrote (a window longer than flow's 64 tokens: --last crops)."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main

TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n" * 4


@pytest.fixture(scope="module")
def attention_json(tmp_path_factory):
    d = tmp_path_factory.mktemp("journey")
    (d / "input.txt").write_text(TEXT, encoding="utf-8")
    assert main(["train", "lm", "--text", str(d / "input.txt"), "--out", str(d / "lm"), "--steps", "2",
                 "--batch-size", "2", "--block-size", "96", "--dim", "16", "--num-layers", "2", "--num-heads", "2",
                 "--eval-every", "0", "--eval-batches", "1", "--device", "cpu"]) == 0
    path = d / "attn.json"
    assert main(["generate", "--checkpoint", str(d / "lm"), "--text", "ROMEO:", "--tokens", "120",
                 "--attention-out", str(path)]) == 0
    return path


def test_generate_writes_a_window_of_the_model_context(attention_json):
    data = json.loads(attention_json.read_text(encoding="utf-8"))
    assert len(data["tokens"]) == 96  # the last block_size characters of prompt + 120
    assert len(data["layers"]) == 2 and len(data["layers"][0]) == 2


def test_view_then_rollout_with_a_picture_then_flow_on_the_last_64(attention_json, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["view", "--json", str(attention_json), "-o", str(tmp_path / "attn.html")]) == 0
    assert (tmp_path / "attn.html").is_file()
    capsys.readouterr()
    assert main(["interpret", "rollout", "--json", str(attention_json), "--picture", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("96 tokens: each output token's 5 largest input tokens")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["interpret", "flow", "--json", str(attention_json)]) == 2
    assert "--last 64" in capsys.readouterr().err
    assert main(["interpret", "flow", "--json", str(attention_json), "--last", "64"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 64 and rows[0].split()[0] == "33"  # token 33 of 96 opens the last 64
