"""``attnlab explain --hf DIR --text T --layer L --head H --query I``: one real head of a model, its
query and keys as the model made them (after RoPE), scores, scale, soft-cap, mask, weights and context,
each equal to values this test computes from the model's own projections."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.cli import main  # noqa: E402

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s"]
TEXT = "the cats sat on the mat"  # [CLS] the cat ##s sat on the mat [SEP]: 9 tokens


def _save(folder, name, model):
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    model.save_pretrained(folder / name)
    transformers.BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder / name)
    return folder / name


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=11, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    with torch.no_grad():
        model.layers[1].self_attn.q_proj.weight.mul_(30.0)  # weights far from uniform
        model.layers[1].self_attn.k_proj.weight.mul_(30.0)
    return _save(tmp_path_factory.mktemp("hf-llama"), "llama", model), model.eval()


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.Gemma2Model(transformers.Gemma2Config(
        vocab_size=11, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=3, attn_logit_softcapping=0.5))
    with torch.no_grad():
        model.layers[0].self_attn.q_proj.weight.mul_(40.0)  # scores that the cap of 0.5 bends
    return _save(tmp_path_factory.mktemp("hf-gemma2"), "gemma2", model)


def _explain(capsys, *argv):
    assert main(["explain", *argv]) == 0
    return capsys.readouterr().out


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def _head_by_hand(model, layer: int, head: int, query: int):
    """Query, keys, values, scores, weights and context of one head, from the model's own projections
    and RoPE (layer, head and query counted from 0; the whole text is real, causal)."""
    ids = torch.tensor([[2, 5, 6, 10, 7, 8, 5, 9, 3]])
    with torch.no_grad():
        h = model(input_ids=ids, output_hidden_states=True).hidden_states[layer]  # the layer's input
        block = model.layers[layer]
        x = block.input_layernorm(h)
        n, d = x.shape[1], 8
        q, k, v = (getattr(block.self_attn, f"{w}_proj")(x).view(1, n, -1, d).transpose(1, 2) for w in "qkv")
        cos, sin = model.rotary_emb(x, torch.arange(n)[None])
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    q, k, v = q[0, head, query].double(), k[0, head // 2].double(), v[0, head // 2].double()
    scores = k @ q
    scaled = scores / d**0.5
    weights = torch.softmax(scaled.masked_fill(torch.arange(n) > query, float("-inf")), -1)
    return {"query": q, "keys": k, "scores": scores, "scaled_scores": scaled, "weights": weights,
            "context": weights @ v.double()}


def test_a_llama_head_after_rope_equals_the_hand_computation(llama, capsys):
    path, model = llama
    doc = json.loads(_explain(capsys, "--hf", str(path), "--text", TEXT, "--layer", "2", "--head", "3",
                              "--query", "6", "--format", "json"))
    ref = _head_by_hand(model, 1, 2, 5)
    assert doc["mechanism"] == "scaled-dot" and doc["ok"] is True
    assert doc["title"] == ("A real head of llama: layer 2, head 3 (key/value head 2 of 2), query 6 “on” over "
                            "9 keys, as the model computed it")
    assert doc["inputs"]["mask"] == [True] * 6 + [False] * 3
    torch.testing.assert_close(torch.tensor(doc["inputs"]["query"], dtype=torch.float64), ref["query"], atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(doc["inputs"]["keys"], dtype=torch.float64), ref["keys"], atol=1e-5, rtol=0)
    steps = {s["name"]: s["value"] for s in doc["steps"]}
    assert list(steps) == ["scores", "scaled_scores", "masked_scores", "weights", "context"]
    for name in ("scores", "scaled_scores", "weights", "context"):
        torch.testing.assert_close(torch.tensor(steps[name], dtype=torch.float64), ref[name], atol=1e-5, rtol=1e-5,
                                   msg=name)
    assert ref["weights"].max() > 0.3  # (a head that prefers some keys: the check above is not of near-uniform rows)


def test_a_gemma2_head_shows_the_soft_cap_and_the_window(gemma2, capsys):
    doc = json.loads(_explain(capsys, "--hf", str(gemma2), "--text", TEXT, "--layer", "1", "--head", "2",
                              "--query", "7", "--format", "json"))
    steps = {s["name"]: torch.tensor([float(x) for x in s["value"]], dtype=torch.float64) for s in doc["steps"]}
    assert list(steps) == ["scores", "scaled_scores", "softcapped_scores", "masked_scores", "weights", "context"]
    assert doc["mechanism"] == "softcap" and doc["ok"] is True  # the model's own weights and context agree
    torch.testing.assert_close(steps["softcapped_scores"], 0.5 * torch.tanh(steps["scaled_scores"] / 0.5))
    assert steps["scaled_scores"].abs().max() > 0.5  # the cap bends these scores
    assert doc["inputs"]["mask"] == [False] * 4 + [True] * 3 + [False] * 2  # a window of 3 keys, query 7


def test_the_walkthrough_in_chinese_and_as_text(gemma2, capsys):
    text = _explain(capsys, "--hf", str(gemma2), "--text", "the cat", "--lang", "zh")
    assert text.splitlines()[0] == "gemma2 的一个真实注意力头：第 1 层，第 1 个头，第 4 个查询“[SEP]”，共 4 个键，即模型自己的计算"
    assert "2 claims: 2 exact" in _explain(capsys, "--hf", str(gemma2), "--text", "the cat", "--head", "4")


def _refused(capsys, argv, message):
    assert main(["explain", *argv]) == 2
    assert capsys.readouterr().err == f"attnlab explain: error: {message}\n"


def test_refusals_name_the_range(llama, tmp_path, capsys):
    path = str(llama[0])
    _refused(capsys, ["--hf", path, "--text", TEXT, "--layer", "3"],
             "--layer counts from 1 and llama has layers 2 (1..2); got 3")
    _refused(capsys, ["--hf", path, "--text", TEXT, "--head", "5"],
             "--head counts from 1 and layer 1 has heads 4 (1..4); got 5")
    _refused(capsys, ["--hf", path, "--text", TEXT, "--query", "10"],
             "--query counts from 1 and the text gives tokens 9 (1..9); got 10")
    _refused(capsys, ["--hf", path], "--hf needs --text: the text to run the model on")
    _refused(capsys, ["--hf", str(tmp_path / "none"), "--text", "a"], f"no such model folder: {tmp_path / 'none'}")
    _refused(capsys, ["--example", "vaswani-scaled-dot", "--layer", "1"], "--layer, --head and --query go with --hf MODEL_DIR")


def _call(**changes):
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    call = {"query": q, "key": k, "value": k, "mask": None, "causal": True, "scaling": None, "softcap": None,
            "sinks": None, "output": torch.zeros(1, 3, 2, 4), "weights": torch.zeros(1, 2, 3, 3)}
    return {**call, **changes}


def test_heads_the_walkthrough_has_no_step_for_are_refused():
    from attnlab.explain.hf_head import head_example

    with pytest.raises(ValueError) as err:
        head_example(_call(sinks=torch.zeros(2)), layer=0, head=0, query=0, tokens=["a"] * 3, model="m")
    assert str(err.value) == ("this model's attention has sinks (an extra logit per head) that the walkthrough has "
                              "no step for; explain --hf walks through models without them")
    with pytest.raises(ValueError) as err:
        head_example(_call(mask=torch.zeros(1, 2, 3, 3)), layer=0, head=0, query=0, tokens=["a"] * 3, model="m")
    assert str(err.value) == ("this model's attention adds a position bias (e.g. T5's relative positions) that the "
                              "walkthrough has no step for; explain --hf walks through models without one")


def test_an_encoder_decoder_is_refused(tmp_path, capsys):
    torch.manual_seed(0)
    path = _save(tmp_path, "t5", transformers.T5Model(transformers.T5Config(
        vocab_size=11, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0)))
    capsys.readouterr()  # (saving's progress bar)
    _refused(capsys, ["--hf", str(path), "--text", "the cat"],
             f"{path} is an encoder-decoder (t5); this reads encoder-only and decoder-only models")
