"""Hugging Face models in the viewer: tiny randomly initialised BERT, GPT-2 and T5 built from a config here.

Nothing downloads: each model and a word-piece tokenizer (a vocabulary written in the
test) are saved to a temporary folder and read back with ``local_files_only``. The
pages' weights are compared with the model's own ``output_attentions`` (an independent
forward pass in the test).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.cli import main  # noqa: E402
from attnlab.viz import from_transformers  # noqa: E402
from attnlab.viz.hf import display_token, load_and_run  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]


def _save(folder, name):
    from transformers import (
        BertConfig,
        BertModel,
        BertTokenizer,
        GPT2Config,
        GPT2Model,
        T5Config,
        T5Model,
    )

    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    cfg = {"bert": (BertConfig(vocab_size=11, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=32), BertModel),
           "gpt2": (GPT2Config(vocab_size=11, n_embd=16, n_layer=3, n_head=2, bos_token_id=0, eos_token_id=0),
                    GPT2Model),
           "t5": (T5Config(vocab_size=11, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=4,
                           decoder_start_token_id=0), T5Model)}[name]
    torch.manual_seed(0)
    model = cfg[1](cfg[0]).eval()
    model.save_pretrained(folder / name)
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder / name)
    return folder / name, model


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    return {name: _save(folder, name) for name in ("bert", "gpt2", "t5")}


def _ids(text):
    return [2] + [VOCAB.index(w) for w in text] + [3]


def test_bert_encoder_maps(models, tmp_path):
    path, _ = models["bert"]
    ids = torch.tensor([_ids(["the", "cat", "##s", "sat"])])
    model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = model(input_ids=ids, output_attentions=True)
    v = load_and_run(path, "the cats sat")
    assert [s["name"] for s in v["sections"]] == ["attention"] and "masked" not in v
    assert v["tokens"] == ["[CLS]", "the", "cat", "##s", "sat", "[SEP]"]
    np.testing.assert_allclose(v["layers"], torch.stack(ref.attentions)[:, 0].numpy(), atol=1e-6)
    assert main(["view", "--hf", str(path), "--text", "the cats sat", "-o", str(tmp_path / "b.html")]) == 0


def test_gpt2_decoder_maps_are_causal(models):
    path, _ = models["gpt2"]
    v = load_and_run(path, "the cat sat on the mat")
    assert v["layers"].shape == (3, 2, 8, 8)
    upper = np.triu(np.ones((8, 8), bool), 1)
    assert v["masked"][0, 0].tolist() == upper.tolist()  # the future, masked (hatched), not "attended 0"
    np.testing.assert_allclose(v["layers"].sum(-1), 1.0, atol=1e-5)


def test_t5_encoder_decoder_and_cross_maps(models, tmp_path):
    path, _ = models["t5"]
    model = transformers.T5Model.from_pretrained(path, attn_implementation="eager").eval()
    enc = torch.tensor([_ids(["the", "cat", "sat"])])
    dec = torch.tensor([[0] + [VOCAB.index(w) for w in ["the", "mat"]]])
    with torch.no_grad():
        out = model(input_ids=enc, decoder_input_ids=dec, output_attentions=True)
    v = from_transformers(out, _tokens(enc), _tokens(dec), title="t5")
    names = [s["name"] for s in v["sections"]]
    assert names == ["encoder", "decoder", "cross"]
    enc_s, dec_s, cross = v["sections"]
    assert enc_s["layers"].shape == (2, 4, 5, 5) and dec_s["layers"].shape == (2, 4, 3, 3)
    assert cross["layers"].shape == (2, 4, 3, 5) and cross["key_tokens"] == enc_s["tokens"]
    np.testing.assert_allclose(cross["layers"], torch.stack(out.cross_attentions)[:, 0].numpy(), atol=1e-6)
    np.testing.assert_allclose(dec_s["layers"], torch.stack(out.decoder_attentions)[:, 0].numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="decoder_tokens"):
        from_transformers(out, _tokens(enc))
    page = tmp_path / "t5.html"
    assert main(["view", "--hf", str(path), "--text", "the cat sat", "--target", "the mat", "-o", str(page),
                 "--picture", str(tmp_path / "t5.png")]) == 0
    assert {p.name for p in tmp_path.glob("t5-*.png")} == {"t5-encoder.png", "t5-decoder.png", "t5-cross.png"}


def _tokens(ids):
    return [VOCAB[i] for i in ids[0].tolist()]


def test_errors_and_markers(models, tmp_path, capsys):
    assert display_token("Ġcat") == " cat" and display_token("▁le") == " le" and display_token("Ċ") == "\n"
    with pytest.raises(ValueError, match="output_attentions"):
        from_transformers({"attentions": None}, ["a"])
    for argv, words in ((["--hf", str(tmp_path / "nope"), "--text", "x"], "no such model folder"),
                        (["--hf", str(models["bert"][0])], "--hf needs --text"),
                        (["--example", "tutorial1-additive", "--text", "x"], "--text goes with --hf"),
                        (["--hf", str(tmp_path), "--text", "x"], "no config.json")):
        capsys.readouterr()
        assert main(["view", *argv, "-o", str(tmp_path / "e.html")]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_neuron_view_queries_and_keys_reproduce_the_weights(models, name):
    """softmax(q·k/√d) over the recorded q and k (NumPy, here) gives the model's own weights."""
    v = load_and_run(models[name][0], "the cat sat")
    q, k = v["queries"].astype(np.float64), v["keys"].astype(np.float64)  # (layers, h, n, d)
    assert q.shape[:3] == v["layers"].shape[:3] and q.shape == k.shape
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if name == "gpt2":
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    w = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(w / w.sum(-1, keepdims=True), v["layers"], atol=1e-5)
