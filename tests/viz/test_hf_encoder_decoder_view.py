"""The viewer's Hugging Face encoder–decoder page: the decoder's tokens and the three kinds of weights.

Tiny randomly initialised BART and T5 models are built from a config here (the encoder and
the decoder with different layer and head counts, a decoder start token that is not the
padding token), saved with a word-piece tokenizer whose vocabulary is written here, and
read by ``load_and_run``. The reference is the model's own ``output_attentions`` from a
forward pass in the test on ids written by hand: the encoder's self-attention, the decoder's
self-attention and the cross-attention must land in the sections of those names, with the
decoder's tokens (its start token, then the target's word pieces) on their rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.viz.hf import load_and_run  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]
START = 4  # the decoder's start token: [MASK], so that it cannot be confused with [PAD] or [CLS]


def _config(name):
    if name == "bart":
        return transformers.BartConfig(
            vocab_size=len(VOCAB), d_model=16, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
            pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=START), transformers.BartModel
    return transformers.T5Config(
        vocab_size=len(VOCAB), d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=1, num_heads=4,
        pad_token_id=0, eos_token_id=3, decoder_start_token_id=START), transformers.T5Model


@pytest.fixture(scope="module", params=["bart", "t5"])
def saved(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    cfg, cls = _config(request.param)
    torch.manual_seed(0)
    model = cls(cfg).eval()
    model.save_pretrained(folder / "model")
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder / "model")
    return folder / "model", cls


def _reference(path, cls, enc_words, dec_words):
    """The model's own weights on ids written here: [CLS] words [SEP] for the encoder, START words for the decoder."""
    model = cls.from_pretrained(path, attn_implementation="eager").eval()
    enc = torch.tensor([[2] + [VOCAB.index(w) for w in enc_words] + [3]])
    dec = torch.tensor([[START] + [VOCAB.index(w) for w in dec_words]])
    with torch.no_grad():
        out = model(input_ids=enc, attention_mask=torch.ones_like(enc), decoder_input_ids=dec, output_attentions=True)
    return {name: torch.stack(maps)[:, 0].double().numpy()
            for name, maps in (("encoder", out.encoder_attentions), ("decoder", out.decoder_attentions),
                               ("cross", out.cross_attentions))}


def test_sections_hold_the_models_own_weights_and_the_decoders_tokens(saved):
    path, cls = saved
    v = load_and_run(path, "the cats sat", "the mat on")
    ref = _reference(path, cls, ["the", "cat", "##s", "sat"], ["the", "mat", "on"])
    enc_s, dec_s, cross = v["sections"]
    assert [s["name"] for s in v["sections"]] == ["encoder", "decoder", "cross"]
    enc_tokens, dec_tokens = ["[CLS]", "the", "cat", "##s", "sat", "[SEP]"], ["[MASK]", "the", "mat", "on"]
    assert enc_s["tokens"] == enc_tokens and enc_s.get("key_tokens") in (None, enc_tokens)
    assert dec_s["tokens"] == dec_tokens and dec_s.get("key_tokens") in (None, dec_tokens)
    assert cross["tokens"] == dec_tokens and cross["key_tokens"] == enc_tokens
    # (layers, heads, q, k): 2 encoder layers over 6 tokens, 1 decoder layer over 4, cross 4 × 6
    heads = 2 if cls is transformers.BartModel else 4
    assert enc_s["layers"].shape == (2, heads, 6, 6)
    assert dec_s["layers"].shape == (1, 4, 4, 4) and cross["layers"].shape == (1, 4, 4, 6)
    for s in (enc_s, dec_s, cross):
        np.testing.assert_allclose(s["layers"], ref[s["name"]], atol=1e-6, err_msg=s["name"])
        np.testing.assert_allclose(s["layers"].sum(-1), 1.0, atol=1e-5, err_msg=s["name"])  # softmax rows
    future = np.triu(np.ones((4, 4), bool), 1)
    assert not dec_s["layers"][..., future].any()  # the decoder never attends its future...
    assert np.array_equal(np.broadcast_to(dec_s["masked"], dec_s["layers"].shape)[0, 0], future)  # ...shown masked
    assert "masked" not in enc_s or not np.any(enc_s["masked"])
    assert "masked" not in cross or not np.any(cross["masked"])


def test_the_decoder_reads_the_text_when_no_target_is_given(saved):
    path, cls = saved
    v = load_and_run(path, "the cat sat on the mat")
    ref = _reference(path, cls, ["the", "cat", "sat", "on", "the", "mat"], ["the", "cat", "sat", "on", "the", "mat"])
    dec_s, cross = v["sections"][1:]
    assert dec_s["tokens"] == ["[MASK]", "the", "cat", "sat", "on", "the", "mat"]
    assert cross["key_tokens"] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    np.testing.assert_allclose(dec_s["layers"], ref["decoder"], atol=1e-6)
    np.testing.assert_allclose(cross["layers"], ref["cross"], atol=1e-6)
