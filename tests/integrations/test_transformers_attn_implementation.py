"""``attn_implementation="attnlab"`` equals transformers' eager attention in every family that routes
through the interface: the same random weights loaded both ways, hidden states at real tokens to 1e-4
and weights at real queries to 1e-5 in float32 (left and right padding in one batch), bfloat16 within
its precision, and greedy ``generate()`` with its cache giving the same tokens."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="needs the hf extra (pip install 'attnlab[hf]')")

from attnlab.integrations import transformers as hf_attnlab  # noqa: E402

V = 61  # vocabulary size of every tiny model


def _llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2))


def _mistral():  # a window of 3 keys, shorter than the 8 tokens
    return transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, sliding_window=3))


def _qwen2():
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2))


def _gemma2():  # a soft-cap small enough to bend the scores, and a window of 3 on every other layer
    return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, sliding_window=3,
        attn_logit_softcapping=0.5, final_logit_softcapping=None))


def _gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=32))


def _bert():
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=32))


def _gpt_oss():  # attention sinks (s_aux) and a window
    return transformers.GptOssForCausalLM(transformers.GptOssConfig(
        vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=3,
        layer_types=["sliding_attention", "full_attention"]))


FAMILIES = {"llama": _llama, "mistral": _mistral, "qwen2": _qwen2, "gemma2": _gemma2, "gpt2": _gpt2,
            "bert": _bert, "gpt_oss": _gpt_oss}
GENERATIVE = [name for name in FAMILIES if name != "bert"]


def _model(family: str, dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    model = FAMILIES[family]().eval().to(dtype)
    with torch.no_grad():
        if family == "gpt_oss":  # the sinks start at zero: give them values that change the weights
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 1.0)
        if family == "gemma2":  # scores of a few units, so that the cap of 0.5 bends them
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(30.0)
                layer.self_attn.k_proj.weight.mul_(30.0)
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0 left-padded by 3, row 1 right-padded by 2, row 2 unpadded; 8 tokens."""
    ids = torch.randint(1, V, (3, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 8, dtype=torch.long)
    mask[0, :3] = 0
    mask[1, 6:] = 0
    return ids, mask


def _run(model, impl: str, ids: torch.Tensor, mask: torch.Tensor, **kwargs):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **kwargs)


def _assert_same(eager, ours, real: torch.Tensor, atol: float, atol_weights: float | None) -> None:
    assert len(eager.hidden_states) == len(ours.hidden_states)
    for i, (a, b) in enumerate(zip(eager.hidden_states, ours.hidden_states)):
        torch.testing.assert_close(b[real].float(), a[real].float(), atol=atol, rtol=0, msg=f"hidden state {i}")
    if atol_weights is None:
        return
    assert len(ours.attentions) == len(eager.attentions) == 2
    for i, (a, b) in enumerate(zip(eager.attentions, ours.attentions)):
        assert b is not None and b.shape == a.shape, f"layer {i}: weights {None if b is None else b.shape}"
        # (b, h, q, k) → the real queries (n, h, k)
        torch.testing.assert_close(b.transpose(1, 2)[real].float(), a.transpose(1, 2)[real].float(),
                                   atol=atol_weights, rtol=0, msg=f"weights of layer {i}")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_float32_hidden_states_and_weights_equal_eager_with_left_and_right_padding(family):
    model = _model(family)
    ids, mask = _batch()
    eager = _run(model, "eager", ids, mask, output_attentions=True)
    ours = _run(model, "attnlab", ids, mask, output_attentions=True)
    _assert_same(eager, ours, mask.bool(), 1e-4, 1e-5)
    fast = _run(model, "attnlab", ids, mask)  # the fused path: no weights asked for
    assert fast.attentions is None
    _assert_same(eager, fast, mask.bool(), 1e-4, None)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bfloat16_hidden_states_and_weights_are_eagers_within_bfloat16(family):
    model = _model(family, torch.bfloat16)
    ids, mask = _batch()
    eager = _run(model, "eager", ids, mask, output_attentions=True)
    ours = _run(model, "attnlab", ids, mask, output_attentions=True)
    assert ours.hidden_states[-1].dtype == torch.bfloat16 and ours.attentions[0].dtype == torch.bfloat16
    _assert_same(eager, ours, mask.bool(), 5e-2, 2e-2)


@pytest.mark.parametrize("family", GENERATIVE)
def test_greedy_generate_with_the_cache_gives_eagers_tokens(family):
    model = _model(family)
    ids, mask = _batch()
    ids, mask = ids[[0, 2]], mask[[0, 2]]  # left padding, as generation wants
    out = {}
    for impl in ("eager", "attnlab"):
        model.set_attn_implementation(impl)
        out[impl] = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert out["attnlab"].shape == (2, 14)
    assert out["attnlab"].tolist() == out["eager"].tolist()


def test_the_soft_cap_and_the_window_shape_gemma2s_weights():
    """(The Gemma 2 case above could not fail if the cap or the window were ignored on both sides.)"""
    model = _model("gemma2")
    ids, mask = _batch()
    ours = _run(model, "attnlab", ids, mask, output_attentions=True).attentions
    assert torch.all(ours[0][2, :, 5, :3] == 0)  # layer 0 slides: query 5 sees keys 3, 4, 5 only
    assert torch.all(ours[1][2, :, 5, :3] > 0)  # layer 1 sees everything before it
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    uncapped = _run(model, "attnlab", ids, mask, output_attentions=True).attentions
    assert (ours[1] - uncapped[1]).abs().max() > 0.05


def test_a_query_that_may_attend_nothing_gets_zero_weights():
    model = _model("llama")
    ids, mask = _batch()
    ours = _run(model, "attnlab", ids, mask, output_attentions=True)
    for weights in ours.attentions:
        assert torch.equal(weights[0, :, :3], torch.zeros_like(weights[0, :, :3]))  # row 0's 3 left pads
        torch.testing.assert_close(weights[0, :, 3:].sum(-1), torch.ones(4, 5))


def _call(**kwargs):
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, kwargs.pop("h_kv", 2), 2, 8)
    return hf_attnlab.attnlab_attention_forward(torch.nn.Module(), q, k, k, None, **kwargs)


def _by_hand(q, k, v, allowed):
    """Eager's arithmetic with repeat_kv, in float64; a row that may attend nothing is zero."""
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1).double(), v.repeat_interleave(g, dim=1).double()
    scores = (q.double() @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return (w @ v).transpose(1, 2).float(), w.float()


CAUSAL5 = torch.ones(5, 5, dtype=torch.bool).tril()


@pytest.mark.parametrize("case, q_len, k_len, kwargs, allowed", [
    ("a padding mask", 5, 5, {"mask": torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 1]]).bool()[:, None, None, :]
                              & CAUSAL5}, None),
    ("causal, no mask", 5, 5, {"is_causal": True}, CAUSAL5),
    ("one query over a cache", 1, 5, {"is_causal": True}, torch.ones(1, 5, dtype=torch.bool)),
    ("a window and no mask", 5, 5, {"is_causal": True, "sliding_window": 2}, CAUSAL5 & ~CAUSAL5.tril(-2)),
    ("not causal", 5, 5, {"is_causal": False}, torch.ones(5, 5, dtype=torch.bool)),
])
def test_grouped_query_heads_without_repeating_keys_equal_repeated_keys(case, q_len, k_len, kwargs, allowed):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, q_len, 8), torch.randn(2, 2, k_len, 8), torch.randn(2, 2, k_len, 8)
    mask = kwargs.pop("mask", None)
    allowed = mask if allowed is None else allowed
    ref_out, ref_w = _by_hand(q, k, v, allowed)
    for weights in (True, False):
        out, w = hf_attnlab.attnlab_attention_forward(torch.nn.Module(), q, k, v, mask, output_attentions=weights,
                                                       **kwargs)
        torch.testing.assert_close(out, ref_out, msg=case)
        if weights:
            torch.testing.assert_close(w, ref_w, msg=case)
        else:
            assert w is None


def test_an_empty_static_caches_prefill_reads_only_the_written_keys():
    """No mask, causal, more keys than queries: the keys past the queries are unwritten (upper-left)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 6, 8), torch.randn(1, 4, 6, 8)
    k[:, :, 3:], v[:, :, 3:] = 1e4, float("nan")  # what an unwritten slot may hold
    out, w = hf_attnlab.attnlab_attention_forward(torch.nn.Module(), q, k, v, None, is_causal=True,
                                                   output_attentions=True)
    ref_out, ref_w = _by_hand(q, k[:, :, :3], v[:, :, :3], torch.ones(3, 3, dtype=torch.bool).tril())
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(w, ref_w)


def test_t5s_position_bias_encoder_decoder_and_cross_attention_equal_eager():
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, decoder_start_token_id=0,
        relative_attention_num_buckets=8)).eval()
    ids, mask = _batch()
    dec = torch.randint(1, V, (3, 5), generator=torch.Generator().manual_seed(2))
    out = {}
    for impl in ("eager", "attnlab"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            out[impl] = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True,
                              output_hidden_states=True)
    e, o = out["eager"], out["attnlab"]
    real = mask.bool()
    torch.testing.assert_close(o.encoder_last_hidden_state[real], e.encoder_last_hidden_state[real], atol=1e-4, rtol=0)
    torch.testing.assert_close(o.logits, e.logits, atol=1e-4, rtol=0)
    for what in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for a, b in zip(getattr(e, what), getattr(o, what), strict=True):
            rows = a if what != "encoder_attentions" else a.transpose(1, 2)[real]
            ours = b if what != "encoder_attentions" else b.transpose(1, 2)[real]
            torch.testing.assert_close(ours, rows, atol=1e-5, rtol=0, msg=what)
    model.set_attn_implementation("eager")
    greedy = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False)
    model.set_attn_implementation("attnlab")
    assert model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False).tolist() == greedy.tolist()


def test_heads_that_do_not_group_are_refused_with_both_shapes():
    with pytest.raises(ValueError) as err:
        _call(h_kv=3)
    assert str(err.value) == ("query heads (4) must be a multiple of key/value heads (3); got query "
                              "(1, 4, 2, 8) and key (1, 3, 2, 8)")


def test_under_a_trace_every_layer_records_its_steps_and_they_are_the_models_weights():
    import attnlab

    model = _model("gemma2")
    ids, mask = _batch()
    model.set_attn_implementation("attnlab")
    with attnlab.trace() as t, torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    weights = [s.value for s in t if s.name == "weights"]
    assert [s.name for s in t].count("softcapped_scores") == 2 and len(weights) == 2
    for layer, w in enumerate(weights):  # (b, h_kv, g·q, k) as the core saw them: the g heads of a key head stacked
        torch.testing.assert_close(w.reshape(out.attentions[layer].shape), out.attentions[layer], atol=0, rtol=0)
