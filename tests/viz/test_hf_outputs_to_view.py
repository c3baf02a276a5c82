"""attnlab.viz.hf without transformers: a model's attention outputs (built here as tensors) become viewer
sections with the tokens shown as text, causal maps masked, the chosen batch element, and exact errors;
the forward hooks keep each layer's queries and keys; the folder and text checks say what is wrong."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from attnlab.viz import hf


def _err(call) -> str:
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


def _maps(*shape, seed=0):
    return torch.softmax(
        torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64), -1
    )


def test_display_token_turns_word_piece_markers_back_into_whitespace():
    assert hf.display_token("Ġcat") == " cat" and hf.display_token("Ċ") == "\n"
    assert hf.display_token("▁the") == " the" and hf.display_token("ĉx") == "\tx"
    assert hf.display_token("##s") == "##s" and hf.display_token(7) == "7"


def test_an_encoders_attentions_are_one_section_of_the_chosen_batch_element():
    layers = (
        _maps(2, 2, 3, 3, seed=1),
        _maps(2, 2, 3, 3, seed=2),
    )  # 2 layers of (batch 2, heads 2, 3, 3)
    v = hf.from_transformers(
        {"attentions": layers}, ["[CLS]", "Ġcat", "▁sat"], batch_index=1, title="bert"
    )
    assert v["title"] == "bert" and [s["name"] for s in v["sections"]] == ["attention"]
    assert v["tokens"] == ["[CLS]", " cat", " sat"] and v["key_tokens"] == ["[CLS]", " cat", " sat"]
    assert v["layers"].dtype == np.float32 and v["layers"].shape == (2, 2, 3, 3)
    want = np.stack([layers[0][1].numpy(), layers[1][1].numpy()]).astype(np.float32)
    np.testing.assert_array_equal(v["layers"], want)
    assert "masked" not in v  # not causal
    obj = hf.from_transformers(
        SimpleNamespace(attentions=layers), ["a", "b", "c"]
    )  # a model output object
    assert obj["title"] == "attention"
    np.testing.assert_array_equal(
        obj["layers"], np.stack([m[0].numpy() for m in layers]).astype(np.float32)
    )


def test_a_causal_decoders_future_is_masked():
    w = torch.tril(torch.ones(1, 2, 3, 3, dtype=torch.float64))
    w = w / w.sum(-1, keepdim=True)
    v = hf.from_transformers({"attentions": (w, w)}, ["a", "b", "c"])
    assert v["masked"].shape == (2, 2, 3, 3)
    assert v["masked"][1, 1].tolist() == [
        [False, True, True],
        [False, False, True],
        [False, False, False],
    ]
    one = hf.from_transformers(
        {"attentions": (torch.ones(1, 1, 1, 1),)}, ["a"]
    )  # one token: nothing to mask
    assert "masked" not in one
    rect = torch.zeros(
        1, 1, 2, 3
    )  # zero above the diagonal but not square: not a causal self-attention
    rect[..., 0] = 1.0
    assert "masked" not in hf.from_transformers({"attentions": (rect,)}, ["a", "b"])


def test_an_encoder_decoders_three_sections():
    enc, dec, cross = (
        _maps(1, 2, 3, 3, seed=3),
        _maps(1, 2, 2, 2, seed=4),
        _maps(1, 2, 2, 3, seed=5),
    )
    out = {"encoder_attentions": (enc,), "decoder_attentions": (dec,), "cross_attentions": (cross,)}
    v = hf.from_transformers(out, ["▁le", "▁chat", "</s>"], ["<pad>", "▁the"])
    assert [s["name"] for s in v["sections"]] == ["encoder", "decoder", "cross"]
    e, d, c = v["sections"]
    assert (
        e["tokens"] == [" le", " chat", "</s>"]
        and e["key_tokens"] == e["tokens"]
        and "masked" not in e
    )
    assert d["tokens"] == ["<pad>", " the"] and d["key_tokens"] == d["tokens"]
    assert d["masked"][0, 0].tolist() == [[False, True], [False, False]]  # the decoder is causal
    assert c["tokens"] == ["<pad>", " the"] and c["key_tokens"] == [" le", " chat", "</s>"]
    for s, m in ((e, enc), (d, dec), (c, cross)):
        np.testing.assert_array_equal(s["layers"], m.numpy().astype(np.float32))
    assert _err(lambda: hf.from_transformers(out, ["a", "b", "c"])) == (
        "an encoder–decoder's outputs need decoder_tokens (the decoder's input tokens)"
    )
    only_dec = {"decoder_attentions": (dec,)}  # either kind of output makes it an encoder–decoder
    assert _err(lambda: hf.from_transformers(only_dec, ["a"], ["b", "c"])).startswith(
        "the outputs have no encoder_attentions"
    )


@pytest.mark.parametrize(
    "out, says",
    [
        (
            {"attentions": ()},
            "the model has no attention layers (its outputs' attentions is empty)",
        ),
        (
            {},
            "the outputs have no attentions: run the model with output_attentions=True (and "
            "attn_implementation='attnlab' after importing attnlab.integrations.transformers, or 'eager': "
            "transformers' fused attention returns no weights)",
        ),
        (
            {"attentions": (torch.ones(1, 1, 1, 1), None)},
            "the outputs have no attentions: run the model with output_attentions=True (and "
            "attn_implementation='attnlab' after importing attnlab.integrations.transformers, or 'eager': "
            "transformers' fused attention returns no weights)",
        ),
        (
            {"attentions": (torch.ones(1, 2, 2),)},
            "attentions[0] has shape (1, 2, 2); expected (batch, heads, q, k)",
        ),
    ],
)
def test_outputs_without_usable_attentions_are_refused_by_name(out, says):
    assert _err(lambda: hf.from_transformers(out, ["a", "b"])) == says


@pytest.mark.parametrize("index", [2, -1])
def test_a_batch_index_outside_the_batch_is_refused(index):
    out = {"attentions": (torch.ones(2, 1, 1, 1),)}
    assert _err(lambda: hf.from_transformers(out, ["a"], batch_index=index)) == (
        f"batch_index {index} is outside the batch of 2"
    )


# --- queries and keys from forward hooks -------------------------------------------------------------------


class _Self(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key = nn.Linear(d, d), nn.Linear(d, d)


class _Bert(nn.Module):
    """Module names like BERT's: encoder.layer.N.attention.self.query / key."""

    def __init__(self, n_layers, d):
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        for _ in range(n_layers):
            block = nn.Module()
            block.attention = nn.Module()
            block.attention.add_module("self", _Self(d))
            self.encoder.layer.append(block)


class _Gpt2(nn.Module):
    """Module names like GPT-2's: h.N.attn.c_attn, q, k and v side by side."""

    def __init__(self, n_layers, d):
        super().__init__()
        self.h = nn.ModuleList()
        for _ in range(n_layers):
            block = nn.Module()
            block.attn = nn.Module()
            block.attn.c_attn = nn.Linear(d, 3 * d)
            self.h.append(block)


def _heads(y, n_heads):  # (n, h·d) → (h, n, d), written out with torch
    n = y.shape[0]
    return y.reshape(n, n_heads, -1).permute(1, 0, 2).numpy()


def test_hooks_keep_each_bert_layers_queries_and_keys_by_head():
    torch.manual_seed(0)
    model, x = _Bert(2, 4), torch.randn(1, 3, 4)
    store, handles = hf._record_qk(model, n_heads=2)
    assert len(handles) == 4
    with torch.no_grad():
        for i, block in enumerate(model.encoder.layer):
            sa = block.attention.self
            sa.query(x), sa.key(x)
            q_ref, k_ref = (
                x[0] @ sa.query.weight.T + sa.query.bias,
                x[0] @ sa.key.weight.T + sa.key.bias,
            )
            np.testing.assert_allclose(store[i]["queries"], _heads(q_ref, 2), rtol=1e-6)
            np.testing.assert_allclose(store[i]["keys"], _heads(k_ref, 2), rtol=1e-6)
    assert sorted(store) == [0, 1] and store[0]["queries"].shape == (2, 3, 2)
    for h in handles:
        h.remove()


def test_hooks_split_gpt2s_fused_projection_into_queries_and_keys():
    torch.manual_seed(1)
    model, x = _Gpt2(1, 4), torch.randn(1, 3, 4)
    store, handles = hf._record_qk(model, n_heads=2)
    assert len(handles) == 1
    with torch.no_grad():
        c = model.h[0].attn.c_attn
        c(x)
        y = x[0] @ c.weight.T + c.bias
    np.testing.assert_allclose(store[0]["queries"], _heads(y[:, :4], 2), rtol=1e-6)
    np.testing.assert_allclose(store[0]["keys"], _heads(y[:, 4:8], 2), rtol=1e-6)
    handles[0].remove()


def test_queries_and_keys_join_the_view_only_when_every_layer_has_both():
    view = hf.from_transformers(
        {"attentions": (_maps(1, 2, 3, 3), _maps(1, 2, 3, 3, seed=1))}, ["a", "b", "c"], title="t"
    )
    qk = {"queries": np.ones((2, 3, 4), np.float32), "keys": np.full((2, 3, 4), 2.0, np.float32)}
    both = hf._with_queries_and_keys(view, {0: dict(qk), 1: dict(qk)})
    assert (
        both["title"] == "t"
        and both["queries"].shape == (2, 2, 3, 4)
        and both["keys"].shape == (2, 2, 3, 4)
    )
    np.testing.assert_array_equal(both["keys"], np.full((2, 2, 3, 4), 2.0))
    np.testing.assert_array_equal(both["layers"], view["layers"])
    assert hf._with_queries_and_keys(view, {}) is view
    assert hf._with_queries_and_keys(view, {0: dict(qk)}) is view  # a layer missing
    assert (
        hf._with_queries_and_keys(view, {0: dict(qk), 1: {"queries": qk["queries"]}}) is view
    )  # keys missing
    assert hf._with_queries_and_keys(view, {1: dict(qk), 2: dict(qk)}) is view  # not layers 0 and 1


# --- folder and text checks ------------------------------------------------------------------------------------


def test_one_line_collapses_whitespace_and_cuts_at_300_characters():
    assert hf._one_line(ValueError("a\n  b\tc")) == "a b c"
    assert hf._one_line(KeyError()) == "KeyError"
    assert hf._one_line(ValueError("x" * 300)) == "x" * 300
    assert hf._one_line(ValueError("x" * 301)) == "x" * 297 + "..."


def test_reading_turns_any_error_into_one_value_error_naming_the_step(tmp_path):
    with pytest.raises(ValueError) as e:
        with hf._reading(tmp_path, "could not load its tokenizer"):
            raise OSError("no\nfile")
    assert str(e.value) == f"{tmp_path}: could not load its tokenizer: no file"
    assert e.value.__cause__ is None


def test_weight_files_must_be_safetensors(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    (tmp_path / "a.pkl").write_bytes(b"")
    assert _err(lambda: hf._check_weight_files(tmp_path)) == (
        f"{tmp_path} holds its weights as a Python pickle (a.pkl, pytorch_model.bin), which attnlab never unpickles "
        "(it can run code): convert it to safetensors, e.g. model.save_pretrained(dir, safe_serialization=True) "
        "where you trust the file"
    )
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert (
        hf._check_weight_files(tmp_path) is None
    )  # safetensors present: the pickles are never read
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _err(lambda: hf._check_weight_files(empty)) == (
        f"{empty} has no weights: expected model.safetensors (or sharded *.safetensors)"
    )


def test_text_with_a_lone_surrogate_is_refused_by_position():
    assert hf._check_text("fine ✓", "--text") is None
    assert _err(lambda: hf._check_text("ab\udc80", "--target")) == (
        "--target is not valid text: character 2 is a lone surrogate ('\\udc80'; a command line that is not UTF-8?)"
    )
