"""``attnlab view --hf DIR``: every bad model folder, text or weight file is one line and exit 2.

Each test builds a tiny BERT (or GPT-2) from a config here, saves it to a temporary folder
(nothing downloads), spoils one thing, and runs the command: the error must be a single line
naming the problem, with no traceback and no "internal error" (exit 70).
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.cli import main  # noqa: E402
from attnlab.viz.hf import load_and_run  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]


def bert(folder: pathlib.Path, **config) -> pathlib.Path:
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    cfg = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 32, **config}
    torch.manual_seed(0)
    BertModel(BertConfig(**cfg)).eval().save_pretrained(folder)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    return folder


def gpt2_without_special_tokens(folder: pathlib.Path) -> pathlib.Path:
    """A GPT-2 with a word-level tokenizer that adds no special tokens: an empty text gives 0 tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    torch.manual_seed(0)
    GPT2Model(GPT2Config(vocab_size=len(VOCAB), n_embd=16, n_layer=2, n_head=2, n_positions=16)).save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]").save_pretrained(folder)
    return folder


def one_line_error(argv, capsys) -> str:
    capsys.readouterr()
    code = main(["view", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err and "internal error" not in err, err
    return err


def view(capsys, tmp_path, folder, text="the cat sat", *extra) -> str:
    return one_line_error(["--hf", str(folder), "--text", text, "-o", str(tmp_path / "page.html"), *extra], capsys)


def test_a_good_folder_still_works(tmp_path):
    v = load_and_run(bert(tmp_path / "m"), "the cat sat")
    assert v["layers"].shape == (2, 2, 5, 5)


def test_text_of_no_tokens(tmp_path, capsys):
    folder = gpt2_without_special_tokens(tmp_path / "g")
    assert load_and_run(folder, "the cat")["layers"].shape == (2, 2, 2, 2)  # the folder itself is fine
    assert "no tokens" in view(capsys, tmp_path, folder, "")
    assert "no tokens" in view(capsys, tmp_path, folder, "   ")


def test_text_longer_than_the_models_positions(tmp_path, capsys):
    folder = bert(tmp_path / "m", max_position_embeddings=6)
    assert load_and_run(folder, "the cat sat on")["layers"].shape[-1] == 6  # [CLS] + 4 + [SEP]: the limit
    err = view(capsys, tmp_path, folder, "the cat sat on the")
    assert "7 tokens" in err and "at most 6" in err


def test_lone_surrogates_in_the_text(tmp_path, capsys):
    folder = bert(tmp_path / "m")
    err = view(capsys, tmp_path, folder, "the \udcff cat")
    assert "lone surrogate" in err and "character 4" in err


@pytest.mark.parametrize("spoil", ["garbage", "truncated", "empty"])
def test_corrupt_weights(tmp_path, capsys, spoil):
    folder = bert(tmp_path / "m")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"garbage": b"\x00not a safetensors file" * 10, "truncated": data[: len(data) // 2],
                         "empty": b""}[spoil])
    assert "could not build the model" in view(capsys, tmp_path, folder)


def test_weights_of_another_shape_than_the_config_says(tmp_path, capsys):
    folder = bert(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(hidden_size=32, intermediate_size=64)  # the saved weights are 16 wide
    (folder / "config.json").write_text(json.dumps(cfg))
    err = view(capsys, tmp_path, folder)
    assert "do not fit config.json" in err and "(16,) in the file, (32,) in the model" in err


@pytest.mark.parametrize("field, value, words", [
    ("num_attention_heads", "two", "'num_attention_heads' expected int"),
    ("hidden_size", 16.5, "'hidden_size' expected int"),
    ("vocab_size", None, "'vocab_size' expected int"),
    ("max_position_embeddings", "many", "'max_position_embeddings' expected int"),
    ("num_attention_heads", 3, "not a multiple of the number of attention heads"),
    ("num_hidden_layers", -1, "no attention layers"),
    ("model_type", "no-such-model", "config.json is not a model configuration"),
])
def test_bad_config_fields(tmp_path, capsys, field, value, words):
    folder = bert(tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg[field] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    err = view(capsys, tmp_path, folder)
    assert str(folder) in err and words in err


def test_config_that_is_not_json(tmp_path, capsys):
    folder = bert(tmp_path / "m")
    (folder / "config.json").write_text("{not json")
    assert "config.json is not a model configuration" in view(capsys, tmp_path, folder)


@pytest.mark.parametrize("which", ["vocab.txt", "tokenizer.json"])
def test_empty_vocabulary(tmp_path, capsys, which):
    folder = bert(tmp_path / "m")
    if which == "vocab.txt":  # the word-piece vocabulary alone (without the fast tokenizer's copy)
        (folder / "tokenizer.json").unlink()
        (folder / "vocab.txt").write_text("")
    else:  # the fast tokenizer's vocabulary
        spec = json.loads((folder / "tokenizer.json").read_text())
        spec["model"]["vocab"] = {}
        spec["added_tokens"] = []
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    err = view(capsys, tmp_path, folder)
    assert "the tokenizer's vocabulary is empty" in err


def test_tokenizer_larger_than_the_models_embeddings(tmp_path, capsys):
    folder = bert(tmp_path / "m", vocab_size=6)  # the tokenizer's "cat" is id 6
    err = view(capsys, tmp_path, folder, "the cat")
    assert "token id 6" in err and "6 embeddings" in err


class _Payload:
    """Unpickling this runs code: it creates a marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_pickled_weights_are_refused_never_unpickled(tmp_path, capsys):
    folder = bert(tmp_path / "m")
    state = transformers.BertModel.from_pretrained(folder).state_dict()
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    torch.save({**state, "payload": _Payload(str(marker))}, folder / "pytorch_model.bin")
    err = view(capsys, tmp_path, folder)
    assert "pickle" in err and "pytorch_model.bin" in err and "safetensors" in err
    assert not marker.exists()


def test_folder_without_weights(tmp_path, capsys):
    folder = bert(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    assert "no weights" in view(capsys, tmp_path, folder)


def test_every_pickle_file_is_named_in_sorted_order(tmp_path, capsys):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    for name in ("rng_state.pth", "pytorch_model.bin", "optimizer.pt"):
        (folder / name).write_bytes(b"")  # never opened: the names alone refuse the folder
    err = view(capsys, tmp_path, folder)
    assert f"{folder} holds its weights as a Python pickle (optimizer.pt, pytorch_model.bin, rng_state.pth)" in err
