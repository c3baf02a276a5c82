"""``attnlab interpret heads``: head importance and ablation of a translator run and of a GPT run, the plot,
and bad input (exit 2, one line). The printed unablated loss is checked against a cross-entropy computed here."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F

from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
TRAIN = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "200", "--max-digits", "3", "--batch-size", "16",
         "--eval-every", "0", "--save-every", "0", "--quiet", "--steps", "3"]
TF = ["--model", "transformer", "--num-layers", "1", "--num-heads", "2", "--dim", "16", "--ff", "32"]


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("heads") / "tf"
    assert main([*TRAIN, *TF, "--out", str(out)]) == 0
    return out


def test_translator_heads_table_curve_and_plot(tf_run, tmp_path, capsys):
    from attnlab.data.batching import collate
    from attnlab.train.heldout import translation_split
    from attnlab.train.load import load_model

    png = tmp_path / "abl.png"
    capsys.readouterr()
    assert main(["interpret", "heads", "--checkpoint", str(tf_run), "--limit", "8", "--picture", str(png)]) == 0
    out = capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = re.findall(r"^(transformer\.\S+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)  # module, h0, h1
    assert [t[0].rsplit(".", 1)[1] for t in table] == ["self_attn", "self_attn", "multihead_attn"]
    removed = re.findall(r"^\s+(\d+)\s+transformer\.\S+ h\d\s+([\d.]+)$", out, re.M)
    assert [int(k) for k, _ in removed] == list(range(1, 3 * 2 + 1))  # every head removed once
    full = float(re.search(r"all heads: ([\d.]+)", out).group(1))
    loaded = load_model(tf_run)  # the loss by hand: mean cross-entropy over the 8 test sentences' target tokens
    b = collate(translation_split(loaded, "test")[1][:8])
    with torch.no_grad():
        logits = loaded.model(b.src, b.src_mask, b.tgt_in)
    ref = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=0, reduction="sum") / (b.tgt_out != 0).sum()
    assert full == pytest.approx(float(ref), abs=1e-4)


def test_gpt_heads_on_a_text(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 4, encoding="utf-8")
    ck = tmp_path / "lm"
    assert main(["train", "lm", "--text", str(text), "--out", str(ck), "--steps", "2", "--batch-size", "2",
                 "--block-size", "16", "--dim", "16", "--num-layers", "2", "--num-heads", "2", "--eval-every", "0",
                 "--eval-batches", "1"]) == 0
    capsys.readouterr()
    assert main(["interpret", "heads", "--checkpoint", str(ck), "--text", str(text), "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 windows of 16 characters" in out
    assert len(re.findall(r"^\s+\d+\s+blocks\.\d\.self_attn h\d", out, re.M)) == 4
    # heads are counted from 1, as the viewer counts them: 2 blocks × heads h1 and h2, each removed once
    assert re.search(r"^module\s+h1\s+h2$", out, re.M)
    assert sorted(re.findall(r"self_attn (h\d)", out)) == ["h1", "h1", "h2", "h2"]
    # without --text: the part of its training text that training held out (its last 10 %, 17 characters)
    assert main(["interpret", "heads", "--checkpoint", str(ck)]) == 0
    assert f"1 windows of 16 characters of the held-out part of {text.resolve()}" in capsys.readouterr().out
    assert json.loads((ck / "config.json").read_text())["data"] == {"name": "text", "path": str(text.resolve())}
    text.unlink()  # the training text is gone: then --text is needed
    assert main(["interpret", "heads", "--checkpoint", str(ck)]) == 2
    assert "--text" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["interpret", "heads"], "--checkpoint"),
    (["interpret", "rollout"], "--json"),
    (["interpret", "heads", "--checkpoint", "no/such/run"], "no/such/run"),
])
def test_bad_input_is_one_line(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_rnn_run_and_bad_plot_are_refused(tf_run, tmp_path, capsys):
    rnn = tmp_path / "rnn"
    assert main([*TRAIN, "--emb", "4", "--hidden", "4", "--attn-dim", "4", "--out", str(rnn)]) == 0
    capsys.readouterr()
    assert main(["interpret", "heads", "--checkpoint", str(rnn)]) == 2
    assert "'seq2seq'" in capsys.readouterr().err
    assert main(["interpret", "heads", "--checkpoint", str(tf_run), "--picture", "x.jpg"]) == 2
    assert ".png" in capsys.readouterr().err
