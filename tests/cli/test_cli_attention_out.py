"""``--attention-out FILE.json`` of translate and caption: the viewer's JSON, equal to the models' own weights.

Each file is checked against the model's Python API on another path than the command's (teacher
forcing with ``need_weights`` instead of step-by-step decoding), and must open in ``attnlab view``.
"""

import json

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.data import source_batch
from attnlab.data.vocab import BOS, EOS
from attnlab.models.transformer import attention_maps
from attnlab.train.load import load_model

pytestmark = pytest.mark.usefixtures("one_thread")

SEQ2SEQ = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "100", "--max-digits", "2", "--batch-size", "16",
           "--eval-every", "0", "--save-every", "0", "--quiet", "--steps", "2"]
RNN = ["--emb", "8", "--hidden", "8", "--attn-dim", "8"]
TRANSFORMER = ["--model", "transformer", "--num-layers", "1", "--num-heads", "2", "--dim", "16", "--ff", "32"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("attention-out")
    assert main([*SEQ2SEQ, *RNN, "--out", str(d / "rnn")]) == 0
    assert main([*SEQ2SEQ, *TRANSFORMER, "--out", str(d / "tf")]) == 0
    assert main(["train", "caption", "--out", str(d / "cap"), "--n-train", "16", "--n-test", "2", "--epochs", "1",
                 "--dim", "16", "--num-heads", "2", "--pool", "4", "--max-objects", "1", "--cells", "2"]) == 0
    return d


def _written(argv, path, capsys) -> dict:
    assert main([*argv, "--attention-out", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith(f": {path}")
    page = path.with_suffix(".html")
    assert main(["view", "--json", str(path), "-o", str(page)]) == 0 and page.is_file()
    return json.loads(path.read_text(encoding="utf-8"))


def _rows_sum_to_one(w: np.ndarray) -> None:
    np.testing.assert_allclose(w.sum(-1), np.ones(w.shape[:-1]), atol=1e-5)


def _translation(run, text: str, max_len: int = 3):
    """What the command decodes, recomputed: the output ids (with EOS if it ended) and the teacher-forced batch."""
    from attnlab.train.decode import greedy

    loaded = load_model(run, kind=("seq2seq", "transformer"))
    model, sv, tv = loaded.model.eval(), loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"]
    src, mask = source_batch([sv.encode(text, strict=True)])
    h = greedy(model, src, mask, max_len=max_len)[0]
    out = list(h.tokens) + ([EOS] if h.ended else [])
    tgt_in = torch.tensor([[BOS, *out[:-1]]])  # (1, t): the decoder's inputs
    return model, tv, src, mask, out, tgt_in


def test_translate_rnn_writes_its_cross_attention(runs, tmp_path, capsys):
    doc = _written(["translate", "--checkpoint", str(runs / "rnn"), "zwei", "--max-len", "3"], tmp_path / "a.json",
                   capsys)
    model, tv, src, mask, out, tgt_in = _translation(runs / "rnn", "zwei")
    (section,) = doc["sections"]
    assert section["key_tokens"] == list("zwei")
    assert (section["name"], section["y_axis"], section["x_axis"]) == ("cross-attention (α_t)", "output token", "source token")
    assert section["tokens"] == [tv.itos[i] if i != EOS else "</s>" for i in out]
    w = np.array(section["layers"])  # (1, 1, t, s)
    assert w.shape == (1, 1, len(out), 4)
    with torch.no_grad():
        _, ref = model(src, mask, tgt_in, need_weights=True)  # (1, t, s), teacher forcing
    np.testing.assert_allclose(w[0, 0], ref[0].numpy(), atol=2e-6)
    _rows_sum_to_one(w)


def test_translate_transformer_writes_encoder_decoder_and_cross_attention(runs, tmp_path, capsys):
    doc = _written(["translate", "--checkpoint", str(runs / "tf"), "zwei", "--max-len", "3"], tmp_path / "t.json",
                   capsys)
    model, tv, src, mask, out, tgt_in = _translation(runs / "tf", "zwei")
    enc, dec, cross = doc["sections"]
    assert [s["name"] for s in doc["sections"]] == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    assert [(s["y_axis"], s["x_axis"]) for s in doc["sections"]] == [
        ("source token", "source token"), ("output token", "decoder input"), ("output token", "source token")]
    words = [tv.itos[i] if i != EOS else "</s>" for i in out]
    assert enc["tokens"] == list("zwei") and "key_tokens" not in enc  # self-attention: keys = queries
    assert dec["tokens"] == words and dec["key_tokens"] == ["<s>", *words[:-1]]
    assert cross["tokens"] == words and cross["key_tokens"] == list("zwei")
    ref = attention_maps(model.transformer, src, tgt_in, src_mask=mask)
    for section, key in ((enc, "encoder"), (dec, "decoder"), (cross, "cross")):
        w = np.array(section["layers"])
        assert w.shape == tuple(ref[key].shape)  # (layers, heads, q, k)
        np.testing.assert_allclose(w, ref[key].numpy(), atol=2e-6)
        _rows_sum_to_one(w)
    t = len(out)
    assert np.all(np.array(dec["layers"])[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] == 0)  # causal
    assert dec["masked"] == np.triu(np.ones((t, t), bool), 1).tolist() and "masked" not in enc  # shown as masked
    with torch.no_grad():  # the last layer's heads, averaged: the alignment forward(need_weights=True) returns
        _, mean = model(src, mask, tgt_in, need_weights=True)
    np.testing.assert_allclose(np.array(cross["layers"])[-1].mean(0), mean[0].numpy(), atol=2e-6)


def test_caption_writes_words_over_grid_cells(runs, tmp_path, capsys):
    from attnlab.data.emoji import read_image

    image = runs / "cap" / "test-scenes" / "000.png"
    doc = _written(["caption", "--checkpoint", str(runs / "cap"), str(image)], tmp_path / "c.json", capsys)
    loaded = load_model(runs / "cap", kind="captioner")
    model, vocab = loaded.model.eval(), loaded.vocabs["vocab"]
    g, h = model.config.grid, model.config.num_heads
    x = torch.as_tensor(read_image(image, model.config.image_size), dtype=torch.float32)[None]
    ids, _ = model.generate(x, vocab.stoi["<bos>"], vocab.stoi["<eos>"])
    words = vocab.tokens(ids[0].tolist())
    assert words, "the tiny captioner said nothing; the test needs a word"
    (section,) = doc["sections"]
    assert section["tokens"] == words
    assert section["key_tokens"][: g + 1] == [f"r1c{c}" for c in range(1, g + 1)] + ["r2c1"]
    assert len(section["key_tokens"]) == g * g and section["key_tokens"][-1] == f"r{g}c{g}"
    with torch.no_grad():  # teacher forcing on <bos> + the words: weights (1, h, T, cells)
        _, ref = model(x, torch.tensor([[vocab.stoi["<bos>"], *[vocab.stoi[w] for w in words]]]))
    w = np.array(section["layers"])
    assert w.shape == (1, h, len(words), g * g)
    np.testing.assert_allclose(w[0], ref[0, :, : len(words)].numpy(), atol=2e-6)
    _rows_sum_to_one(w)


def test_attention_out_into_a_folder_is_one_line_and_exit_2(runs, tmp_path, capsys):
    assert main(["translate", "--checkpoint", str(runs / "rnn"), "zwei", "--max-len", "2",
                 "--attention-out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attnlab translate: error:" in err


def test_a_decoder_without_attention_has_nothing_to_write(tmp_path, capsys):
    run, out = tmp_path / "none", tmp_path / "none.json"
    assert main([*SEQ2SEQ, *RNN, "--attention", "none", "--steps", "1", "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "zwei", "--max-len", "2", "--attention-out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no attention" in err and not out.exists()


def test_view_of_a_transformer_translator_shows_its_teacher_forced_weights(runs, tmp_path):
    from attnlab.cli._model_pages import model_page
    from attnlab.train.decode import length_guard
    from attnlab.train.runtime import Runtime

    assert main(["view", "--checkpoint", str(runs / "tf"), "--text", "zwei", "-o", str(tmp_path / "v.html")]) == 0
    page = model_page(str(runs / "tf"), "zwei", Runtime.local("cpu", "fp32"))  # what that page shows
    model, tv, src, mask, out, tgt_in = _translation(runs / "tf", "zwei", max_len=length_guard([4]))
    assert page["title"] == f"zwei → {tv.decode([i for i in out if i != EOS])}"
    assert page["title"] in (tmp_path / "v.html").read_text(encoding="utf-8")
    enc, dec, cross = page["sections"]
    words = [tv.itos[i] if i != EOS else "</s>" for i in out]
    assert enc["tokens"] == list("zwei") and dec["tokens"] == cross["tokens"] == words
    for section in page["sections"]:
        _rows_sum_to_one(np.array(section["layers"]))
    t = len(out)
    assert np.all(np.array(dec["layers"])[..., np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] == 0)  # causal
    with torch.no_grad():  # teacher forcing on <bos> + the output: the last layer's cross-attention, heads averaged
        _, mean = model(src, mask, tgt_in, need_weights=True)
    np.testing.assert_allclose(np.array(cross["layers"])[-1].mean(0), mean[0].numpy(), atol=2e-6)
