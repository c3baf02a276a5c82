"""What ``generate``, ``evaluate`` and ``pretrained`` print and refuse, run in this process on the shipped
models: generate's greedy text against an argmax loop written here, ``--seed`` (same seed, same text; another
seed, another text), ``--top-k 1`` and ``--no-cache``, the attention file of the last block; evaluate's summary
lines and length table formatted from the metrics it is given, its flags reaching the split and decoder; the
pretrained actions' lines and refusals."""

from __future__ import annotations

import json
import shlex
import types

import pytest
import torch

import attnlab.train.heldout as heldout
import attnlab.train.metrics as metrics
from attnlab import pretrained
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _greedy_by_hand(prompt: str, n: int) -> str:
    loaded = pretrained.load("char-gpt")
    model, vocab = loaded.model, loaded.vocabs["vocab"]
    ids = vocab.encode_tensor(prompt).tolist()
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids[-model.config.block_size :]]))[0, -1]
            ids.append(int(logits.argmax()))
    return "".join(vocab.itos[i] for i in ids)


def _generate(capsys, *argv) -> str:
    assert main(["generate", "--pretrained", "char-gpt", *argv]) == 0
    return capsys.readouterr().out


def test_temperature_zero_is_the_argmax_and_top_k_one_too(capsys):
    want = _greedy_by_hand("ROMEO:", 12) + "\n"
    assert _generate(capsys, "--text", "ROMEO:", "--tokens", "12", "--temperature", "0") == want
    assert (
        _generate(
            capsys, "--text", "ROMEO:", "--tokens", "12", "--temperature", "0", "--no-cache"
        )
        == want
    )
    assert (
        _generate(capsys, "--text", "ROMEO:", "--tokens", "12", "--top-k", "1", "--seed", "5")
        == want
    )


def test_the_seed_makes_two_runs_equal_and_two_seeds_differ(capsys):
    one = _generate(
        capsys, "--text", "ROMEO:", "--tokens", "40", "--seed", "3", "--temperature", "1.5"
    )
    assert (
        _generate(
            capsys, "--text", "ROMEO:", "--tokens", "40", "--seed", "3", "--temperature", "1.5"
        )
        == one
    )
    other = _generate(
        capsys, "--text", "ROMEO:", "--tokens", "40", "--seed", "4", "--temperature", "1.5"
    )
    assert other != one
    assert one.startswith("ROMEO:") and len(one) == len("ROMEO:") + 40 + 1
    default = _generate(capsys, "--text", "ROMEO:", "--tokens", "40", "--temperature", "1.5")
    assert default == _generate(
        capsys, "--text", "ROMEO:", "--tokens", "40", "--temperature", "1.5", "--seed", "0"
    )


def test_the_defaults_start_from_a_newline_and_sample_300_characters_at_temperature_0_8(capsys):
    out = _generate(capsys)
    assert out.startswith("\n") and len(out) == 1 + 300 + 1
    explicit = _generate(
        capsys, "--text", "\n", "--tokens", "300", "--temperature", "0.8", "--seed", "0"
    )
    assert out == explicit  # the documented defaults: temperature 0.8, seed 0, no top-k


def test_the_attention_file_holds_the_last_block(capsys, tmp_path):
    path = tmp_path / "g.json"
    prompt = "AB" + "C" * 130
    out = _generate(capsys, "--text", prompt, "--tokens", "0", "--attention-out", str(path))
    assert out == f"{prompt}\nattention weights (4 layers × 4 heads × 128²): {path}\n"
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["tokens"] == list(prompt[-128:])
    layers = torch.tensor(doc["layers"])
    assert layers.shape == (4, 4, 128, 128)
    assert torch.allclose(layers.sum(-1), torch.ones(4, 4, 128), atol=1e-4)
    assert float(layers.triu(1).abs().max()) == 0.0  # causal
    assert torch.equal(torch.tensor(doc["masked"]), torch.ones(128, 128, dtype=torch.bool).triu(1))  # shown as masked


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--tokens", "-1", "--tokens must be >= 0; got -1"),
        ("--temperature", "-0.5", "--temperature must be >= 0; got -0.5"),
        ("--top-k", "0", "--top-k must be >= 1; got 0"),
        ("--seed", "-3", "--seed must be >= 0; got -3"),
        ("--text", "", "--text must not be empty"),
    ],
)
def test_generate_refuses_each_bad_value(capsys, flag, value, message):
    assert main(["generate", "--pretrained", "char-gpt", flag, value]) == 2
    assert capsys.readouterr().err == f"attnlab generate: error: {message}\n"


# -- evaluate ------------------------------------------------------------------------------------


@pytest.fixture
def scored(monkeypatch):
    """evaluate with its split, decoder and metrics replaced by recorders of what it passes them."""
    seen = {}
    sv = pretrained.load("zh-en-numbers").vocabs["src_vocab"]
    examples = [(sv.encode(t), [1]) for t in ("三千零五", "四十二", "五", "六十", "七百")]

    def split(loaded, name, data_path):
        seen["split"] = (name, data_path, loaded.path.name)
        return types.SimpleNamespace(name="toy-zh-en"), examples

    def translate(model, part, tv, *, beam, runtime):
        seen["translate"] = (len(part), beam, runtime.device.type)
        return ["h"] * len(part), ["r"] * len(part), [3] * len(part)

    def buckets(lengths, k):
        seen["buckets"] = (list(lengths), k)
        return "BUCKETS"

    def by_length(h, r, lengths, b):
        assert b == "BUCKETS"
        return [
            {"lo": 1, "hi": 4, "n": 3, "exact": 66.666, "bleu": 12.34, "chrf": 50.05},
            {"lo": 5, "hi": 9, "n": 2, "exact": 0.0, "bleu": 7.0, "chrf": 100.0},
        ]

    monkeypatch.setattr(heldout, "translation_split", split)
    monkeypatch.setattr(heldout, "translate_examples", translate)
    monkeypatch.setattr(
        metrics, "scores", lambda h, r: {"n": len(h), "exact": 40.0, "bleu": 12.345, "chrf": 56.78}
    )
    monkeypatch.setattr(
        metrics,
        "intervals",
        lambda h, r: {"exact": (10.0, 70.04), "bleu": (1.26, 20.0), "chrf": (50.0, 61.96)},
    )
    monkeypatch.setattr(metrics, "length_buckets", buckets)
    monkeypatch.setattr(metrics, "by_length", by_length)
    return seen


def test_evaluate_prints_the_summary_and_the_length_table(scored, capsys):
    assert main(["evaluate", "--pretrained", "zh-en-numbers"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "toy-zh-en test: 5 sentences, bahdanau decoder, beam 1",
        "exact % 40.0 (95% 10.0–70.0)  BLEU 12.3 (95% 1.3–20.0)  chrF 56.8 (95% 50.0–62.0)",
        "",
        "| source length | n | exact % | BLEU | chrF |",
        "|---|---|---|---|---|",
        "| 1–4 | 3 | 66.7 | 12.3 | 50.0 |",
        "| 5–9 | 2 | 0.0 | 7.0 | 100.0 |",
    ]
    assert scored["split"] == ("test", None, "zh-en-numbers")
    assert scored["translate"] == (5, 1, "cpu")
    assert scored["buckets"] == ([3] * 5, 4)


def test_evaluate_flags_reach_the_split_and_the_decoder(scored, capsys):
    argv = [
        "evaluate",
        "--pretrained",
        "zh-en-numbers",
        "--split",
        "valid",
        "--beam",
        "2",
        "--limit",
        "3",
        "--buckets",
        "7",
        "--data-path",
        "ding.txt",
    ]
    assert main(argv) == 0
    assert (
        capsys.readouterr().out.splitlines()[0]
        == "toy-zh-en valid: 3 sentences, bahdanau decoder, beam 2"
    )
    assert scored["split"] == ("valid", "ding.txt", "zh-en-numbers")
    assert scored["translate"] == (3, 2, "cpu")
    assert scored["buckets"] == ([3] * 3, 7)


def test_evaluate_limit_one_scores_one_sentence(scored, capsys):
    assert (
        main(
            [
                "evaluate",
                "--pretrained",
                "zh-en-numbers",
                "--limit",
                "1",
                "--buckets",
                "1",
                "--beam",
                "1",
            ]
        )
        == 0
    )
    assert scored["translate"] == (1, 1, "cpu")


@pytest.mark.parametrize("flag", ["--beam", "--buckets", "--limit"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_evaluate_refuses_numbers_below_one(scored, capsys, flag, value):
    assert main(["evaluate", "--pretrained", "zh-en-numbers", flag, value]) == 2
    assert (
        capsys.readouterr().err
        == "attnlab evaluate: error: --beam, --buckets and --limit must be >= 1\n"
    )
    assert "split" not in scored


def test_evaluate_writes_the_first_sentence_attention(scored, capsys, tmp_path):
    path = tmp_path / "first.json"
    assert main(["evaluate", "--pretrained", "zh-en-numbers", "--attention-out", str(path)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert (
        last
        == f"attention weights of the first sentence (三千零五 → three thousand and five): {path}"
    )
    doc = json.loads(path.read_text(encoding="utf-8"))
    (section,) = doc["sections"]
    assert doc["title"] == "三千零五 → three thousand and five"
    assert section["tokens"] == ["three", "thousand", "and", "five", "</s>"]
    assert section["key_tokens"] == list("三千零五")


# -- pretrained ----------------------------------------------------------------------------------


def test_pretrained_path_and_recipe(capsys):
    assert main(["pretrained", "path", "caption"]) == 0
    out = capsys.readouterr().out
    assert out == f"{pretrained.folder('caption')}\n" and out.rstrip().endswith("caption")
    assert main(["pretrained", "recipe", "de-en"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("attnlab train seq2seq --data ding-de-en ") and line.endswith("\n")
    assert shlex.split(line)[1:] == pretrained.card("de-en")["recipe"]


def test_pretrained_refuses_a_name_for_list_and_none_for_the_others(capsys):
    assert main(["pretrained", "list", "de-en"]) == 2
    assert (
        capsys.readouterr().err
        == "attnlab pretrained: error: pretrained list takes no name; got 'de-en'\n"
    )
    for action in ("info", "path", "recipe"):
        assert main(["pretrained", action]) == 2
        assert capsys.readouterr().err == (
            f"attnlab pretrained: error: pretrained {action} needs a model name: "
            "de-en, zh-en-numbers, char-gpt, caption\n"
        )


def test_no_cache_and_the_sampling_flags_reach_the_model(capsys, monkeypatch):
    from attnlab.models.gpt import GPT

    calls, real = [], GPT.stream

    def recording(self, prompt, n, **kwargs):
        calls.append((prompt.tolist(), n, {k: v for k, v in kwargs.items() if k != "generator"}))
        return real(self, prompt, n, **kwargs)

    monkeypatch.setattr(GPT, "stream", recording)
    _generate(capsys, "--text", "AB", "--tokens", "3", "--top-k", "5", "--temperature", "0.5")
    _generate(capsys, "--text", "AB", "--tokens", "3", "--no-cache")
    vocab = pretrained.load("char-gpt").vocabs["vocab"]
    ab = [vocab.stoi["A"], vocab.stoi["B"]]
    assert calls == [
        ([ab], 3, {"temperature": 0.5, "top_k": 5, "use_cache": True}),
        ([ab], 3, {"temperature": 0.8, "top_k": None, "use_cache": False}),
    ]
