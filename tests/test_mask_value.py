"""attnlab.Mask: a mask built once as an immutable value, checked at construction and at the call,
against float64 NumPy attention with the mask written out by hand in the test."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import attnlab
from attnlab import Mask
from attnlab.nn import MultiHeadAttention


def _np_attention(q, k, v, allowed, bias=None):
    """float64 softmax(q kᵀ/√d + bias) v over the allowed keys; a row with none is zero."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    allowed = np.broadcast_to(allowed, s.shape) & np.isfinite(s)
    s = np.where(allowed, s, -np.inf)
    top = np.where(allowed.any(-1, keepdims=True), s.max(-1, keepdims=True), 0.0)
    e = np.where(allowed, np.exp(s - top), 0.0)
    den = e.sum(-1, keepdims=True)
    w = np.divide(e, den, out=np.zeros_like(e), where=den > 0)
    return w @ v


def _qkv(b=2, h=3, q=5, k=5, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for n in (q, k, k))


@pytest.mark.parametrize("need_weights", [False, True])
def test_padding_from_lengths_equals_numpy_with_an_empty_sequence(need_weights):
    q, k, v = _qkv(q=4, k=6)
    m = Mask.padding([4, 0], 6)
    allowed = np.array([[j < n for j in range(6)] for n in (4, 0)])[:, None, None, :]
    out, _ = attnlab.attention(q, k, v, mask=m, need_weights=need_weights)
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, allowed), rtol=1e-10, atol=1e-12)
    assert torch.all(out[1] == 0)


def test_padding_from_a_bool_matrix_equals_padding_from_lengths():
    q, k, v = _qkv(q=3, k=5)
    keep = torch.tensor([[True, True, True, False, False], [True] * 5])
    a, _ = attnlab.attention(q, k, v, mask=Mask.padding(keep))
    b, _ = attnlab.attention(q, k, v, mask=Mask.padding([3, 5], 5))
    torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("q_len,k_len", [(3, 6), (6, 3), (5, 5)])
@pytest.mark.parametrize("align", ["bottom-right", "top-left"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_causal_in_both_alignments_equals_numpy(q_len, k_len, align, need_weights):
    q, k, v = _qkv(q=q_len, k=k_len)
    off = k_len - q_len if align == "bottom-right" else 0
    allowed = np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + off
    out, _ = attnlab.attention(q, k, v, mask=Mask.causal(q_len, k_len, align=align), need_weights=need_weights)
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, allowed), rtol=1e-10, atol=1e-12)
    # a mask without sizes is aligned to each call, bottom-right like causal=True
    if align == "bottom-right":
        fit, _ = attnlab.attention(q, k, v, mask=Mask.causal(), need_weights=need_weights)
        torch.testing.assert_close(fit, out, rtol=0, atol=1e-12)


def test_documents_pattern_and_their_combinations_equal_numpy():
    q, k, v = _qkv(b=1, q=6, k=6)
    same = np.equal.outer([0, 0, 1, 1, 1, 2], [0, 0, 1, 1, 1, 2])
    causal = np.tril(np.ones((6, 6), dtype=bool))
    window = np.abs(np.subtract.outer(np.arange(6), np.arange(6))) <= 1
    docs = Mask.documents([0, 2, 5, 6])
    for m, allowed in [(docs, same), (docs & Mask.causal(), same & causal),
                       (Mask.pattern(attnlab.patterns.sliding_window(1), 6), window),
                       (docs | Mask.pattern(attnlab.patterns.sliding_window(1), 6), same | window)]:
        out, _ = attnlab.attention(q, k, v, mask=m)
        np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, allowed), rtol=1e-10, atol=1e-12, err_msg=repr(m))


def test_a_bias_is_added_and_combines_with_padding():
    q, k, v = _qkv(q=4, k=4)
    bias = torch.randn(4, 4, dtype=torch.float64)
    m = Mask.bias(bias) & Mask.padding([4, 2], 4)
    allowed = np.array([[True] * 4, [True, True, False, False]])[:, None, None, :]
    out, _ = attnlab.attention(q, k, v, mask=m)
    np.testing.assert_allclose(out.numpy(), _np_attention(q, k, v, allowed, bias.numpy()), rtol=1e-10, atol=1e-12)


def test_nan_at_padded_keys_and_values_reaches_no_output_nor_gradient():
    q, k, v = _qkv(q=4, k=6)
    k[0, :, 4:], v[0, :, 5] = float("nan"), float("inf")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    m = Mask.padding([4, 6], 6)
    for need_weights in (False, True):
        out, _ = attnlab.attention(q, k, v, mask=m, need_weights=need_weights)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        assert torch.all(k.grad[0, :, 4:] == 0) and torch.all(v.grad[0, :, 4:] == 0)
        q.grad = k.grad = v.grad = None


def test_a_mask_is_immutable_and_keeps_its_own_copy():
    keep = torch.tensor([[True, True, False]])
    m = Mask.padding(keep)
    with pytest.raises(AttributeError, match="^a Mask is immutable: build a new one instead of setting 'b'$"):
        m.b = 3
    keep[0, 2] = True  # the caller's tensor changes; the mask does not
    assert m.keys.tolist() == [[True, True, False]]
    assert m.tensor(1, 3) is m.tensor(1, 3)  # a plan is made once and kept


def test_a_call_plan_is_made_once_per_shape(monkeypatch):
    made = []
    real = Mask._dense
    monkeypatch.setattr(Mask, "_dense", lambda self, *a: made.append(a) or real(self, *a))
    q, k, v = _qkv(q=4, k=4)
    m = Mask.padding([4, 3], 4) & Mask.causal()
    for _ in range(3):
        attnlab.attention(q, k, v, mask=m)
    assert len(made) == 1


def test_refusals_name_what_was_given_and_what_was_expected():
    q, k, v = _qkv(q=4, k=4)
    with pytest.raises(ValueError) as e:
        attnlab.attention(q, k, v, mask=Mask.padding([4, 3, 2], 4))
    assert str(e.value) == "the mask Mask(padding(lengths=[4, 3, 2])) is for b=3; the call has b=2 (b=2, q=4, k=4)"
    with pytest.raises(ValueError) as e:
        Mask.causal(3, 4, align="left")
    assert str(e.value) == "align must be one of ('bottom-right', 'top-left'); got 'left'"
    with pytest.raises(ValueError) as e:
        Mask.dense(torch.ones(3, 3))
    assert str(e.value) == "Mask.dense takes a bool tensor (True = may attend); got dtype torch.float32"
    with pytest.raises(ValueError) as e:
        Mask.bias(torch.zeros(2, 2)) | Mask.causal()
    assert str(e.value) == "a bias does not combine with |: add biases with &, or use bool masks"
    with pytest.raises(ValueError) as e:
        Mask.padding([2, 3]) & Mask.padding([1, 2, 3])
    assert str(e.value) == "masks of different b do not combine: b=2 and b=3"
    with pytest.raises(ValueError) as e:
        Mask.documents([1, 3])
    assert str(e.value) == "cu_seqlens must start at 0 and never decrease; got [1, 3]"
    with pytest.raises(ValueError) as e:
        Mask.padding([3, -1])
    assert str(e.value) == "lengths must be >= 0; got [3, -1]"


@pytest.mark.parametrize("kw", [{}, {"num_kv_heads": 2}, {"add_bias_kv": True}, {"alibi": True}])
@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_attention_takes_a_mask_value_as_it_takes_the_tensor(kw, causal):
    torch.manual_seed(0)
    m = MultiHeadAttention(32, 4, **kw).eval()
    x = torch.randn(3, 7, 32)
    keep = torch.arange(7) < torch.tensor([7, 4, 2])[:, None]
    ref, w_ref = m(x, mask=keep[:, None, None, :], causal=causal, need_weights=True)
    value = Mask.padding([7, 4, 2], 7)
    out, w = m(x, mask=value, causal=causal, need_weights=True)
    fast, _ = m(x, mask=value, causal=causal)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(w, w_ref, rtol=0, atol=0)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    assert torch.all(out[2, 2:] == 0)  # padded queries: zero output


def test_the_transformer_builds_one_mask_per_forward_for_all_its_layers(monkeypatch):
    from attnlab.models.transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab=11, tgt_vocab=13, dim=16, num_heads=2, num_encoder_layers=3, num_decoder_layers=3, dropout=0.0)).eval()
    src, tgt = torch.randint(0, 11, (2, 5)), torch.randint(0, 13, (2, 4))
    src_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    seen = []
    real_forward = MultiHeadAttention.forward
    monkeypatch.setattr(MultiHeadAttention, "forward", lambda self, *a, **kw: seen.append(kw.get("mask")) or
                        real_forward(self, *a, **kw))
    logits = model(src, tgt, src_mask=src_mask)
    values = {id(m) for m in seen if isinstance(m, Mask)}
    assert len(values) == 1 and sum(isinstance(m, Mask) for m in seen) == 3 + 3  # encoder + cross-attention
    # the same numbers as the layers reading the (b, 1, 1, s) tensor themselves
    monkeypatch.setattr(MultiHeadAttention, "forward", real_forward)
    from attnlab.models import transformer as module

    monkeypatch.setattr(module, "_key_mask", lambda mask: mask if mask is None or mask.dim() == 4 else mask[:, None, None, :])
    torch.testing.assert_close(model(src, tgt, src_mask=src_mask), logits, rtol=1e-5, atol=1e-6)


class _Outside(TorchDispatchMode):
    """Counts the operations dispatched outside SDPA (which on ``meta`` decomposes into its own)."""

    def __init__(self):
        super().__init__()
        self.ops, self.inside = [], False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside:
            self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class _Kernel(TorchFunctionMode):
    def __init__(self, counter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is not torch.nn.functional.scaled_dot_product_attention:
            return func(*args, **(kwargs or {}))
        self.counter.inside = True
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.counter.inside = False


def _ops_outside(q_len=64, **kw):
    q, k, v = (torch.empty(2, 4, n, 32, device="meta") for n in (q_len, 64, 64))
    with _Outside() as counter, _Kernel(counter):
        attnlab.attention(q, k, v, **kw)
    return counter.ops


def test_no_mask_and_decoding_dispatch_nothing_outside_the_kernel():
    assert _ops_outside() == []
    assert _ops_outside(q_len=1, causal=True) == []
    assert _ops_outside(q_len=1, mask=Mask.causal()) == []


def test_a_padding_value_dispatches_fewer_operations_than_the_tensor_it_replaces():
    """Where values cannot be read (a GPU's path), the value knows its empty rows and dense form."""
    value = Mask.padding(torch.tensor([64, 30]), 64)
    tensor = torch.ones(2, 1, 1, 64, dtype=torch.bool, device="meta")
    _ops_outside(mask=value)  # its plan for the call's shape: made once
    by_value, by_tensor = _ops_outside(mask=value), _ops_outside(mask=tensor)
    assert len(by_value) < len(by_tensor), (by_value, by_tensor)
    assert "any" not in by_value[:3]  # its empty rows are known: no reduction over the mask first


def test_a_module_reads_the_key_padding_of_a_combined_value_as_padded_queries():
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    ref, _ = m(x, mask=keep[:, None, None, :], causal=True)
    out, _ = m(x, mask=Mask.padding([5, 3], 5) & Mask.causal())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert torch.all(out[1, 3:] == 0)


@pytest.mark.parametrize("name,kw", [("differential", {}), ("mla", {"kv_latent_dim": 8}), ("linear", {}),
                                     ("local", {"window": 2}), ("gqa", {"num_kv_heads": 1})])
def test_every_module_with_a_mask_takes_the_value_as_it_takes_the_tensor(name, kw):
    torch.manual_seed(0)
    m = attnlab.create(name, dim=16, num_heads=2, **kw).eval()
    x = torch.randn(2, 6, 16)
    keep = torch.arange(6) < torch.tensor([6, 4])[:, None]
    ref = m(x, mask=keep[:, None, None, :])
    out = m(x, mask=Mask.padding([6, 4], 6))
    ref, out = (r[0] if isinstance(r, tuple) else r for r in (ref, out))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


def test_the_functional_multi_head_attention_takes_the_value():
    from attnlab.functional import multi_head_attention

    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    w = {n: torch.randn(8, 8) * 0.3 for n in ("w_q", "w_k", "w_v", "w_o")}
    keep = torch.tensor([[True] * 5, [True, True, False, False, False]])
    ref, _ = multi_head_attention(x, x, x, w, num_heads=2, mask=keep[:, None, None, :])
    out, _ = multi_head_attention(x, x, x, w, num_heads=2, mask=Mask.padding([5, 2], 5))
    torch.testing.assert_close(out, ref)


def test_a_causal_value_keeps_no_plan_per_step_of_a_growing_cache():
    m = Mask.causal()
    for k_len in range(3, 9):  # one query, then chunks of two, over a cache that grows
        for q_len in (1, 2):
            q, k, v = _qkv(b=1, h=1, q=q_len, k=k_len)
            out, _ = attnlab.attention(q, k, v, mask=m)
            ref, _ = attnlab.attention(q, k, v, causal=True)
            torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert m._plans == {}


def test_a_documents_value_keeps_its_varlen_plan_and_nothing_else_keeps_one(monkeypatch):
    from attnlab.kernels import varlen

    made = []
    real = varlen.documents
    monkeypatch.setattr(varlen, "documents", lambda *a: made.append(a) or real(*a))
    q, k, v = (t[0].transpose(0, 1) for t in _qkv(b=1, h=2, q=6, k=6))  # packed (total, h, d)
    same = np.equal.outer([0, 0, 0, 1, 1, 2], [0, 0, 0, 1, 1, 2])
    want = _np_attention(*(t.transpose(0, 1) for t in (q, k, v)), same).transpose(1, 0, 2)
    m = Mask.documents([0, 3, 5, 6])
    for _ in range(3):
        out, _ = varlen.varlen_attention(q, k, v, m, block=2)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    assert len(made) == 1 and list(m._plans) == [("documents pattern", False)]
    for _ in range(2):  # the boundaries alone: a pattern for the call, kept by no one
        varlen.varlen_attention(q, k, v, [0, 3, 5, 6], block=2)
    assert len(made) == 3
    with pytest.raises(ValueError) as e:
        varlen.varlen_attention(q, k, v, Mask.causal())
    assert str(e.value) == ("varlen_attention takes cu_seqlens or Mask.documents(cu_seqlens); "
                            "got Mask(causal(align='bottom-right'))")


@pytest.mark.parametrize("positional", ["learned", "rope", "alibi"])
def test_gpt_passes_one_causal_value_to_every_layer_prefill_and_decoding(monkeypatch, positional):
    from attnlab.models.gpt import GPT, GPTConfig
    from attnlab.nn.cache import KVCache

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=16, dim=16, num_layers=3, num_heads=2,
                          positional=positional)).double().eval()
    tokens = torch.randint(0, 11, (2, 7))
    seen = []
    real_forward = MultiHeadAttention.forward
    monkeypatch.setattr(MultiHeadAttention, "forward", lambda self, *a, **kw: seen.append(kw) or
                        real_forward(self, *a, **kw))
    logits = model(tokens)
    assert len({id(kw["mask"]) for kw in seen}) == 1 and len(seen) == 3
    assert all(kw["mask"].is_causal and not kw.get("causal") for kw in seen)
    cache = KVCache(3)
    steps = [model(tokens[:, :4], cache=cache)] + [model(tokens[:, i:i + 1], cache=cache) for i in range(4, 7)]
    # the same numbers as every layer told causal=True (a dense reference: an explicit lower triangle)
    monkeypatch.setattr(MultiHeadAttention, "forward", lambda self, x, *a, mask=None, causal=False, **kw: real_forward(
        self, x, *a, mask=None, causal=True, **kw))
    torch.testing.assert_close(model(tokens), logits, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(torch.cat(steps, 1), logits, rtol=1e-9, atol=1e-10)


@pytest.fixture
def branch_free(monkeypatch):
    """The path a GPU takes (no look at the values on the host), run here on the CPU."""
    import importlib

    monkeypatch.setattr(importlib.import_module("attnlab.functional.attention"), "_host_checks", lambda t: False)


@pytest.mark.parametrize("form", ["value", "tensor"])
@pytest.mark.parametrize("grad", [False, True])
def test_key_padding_on_the_device_path_cleans_the_padded_rows_and_keeps_the_rule(branch_free, grad, form):
    """A padding value and the (b, 1, 1, k) bool tensor it replaces take the same lean path."""
    q, k, v = _qkv(b=3, q=4, k=6)
    k[0, :, 4], v[0, :, 5, 1] = float("nan"), float("inf")  # padded: must change nothing
    v[1, 1, 2, 3] = float("nan")  # allowed: every row of that (sequence, head) is NaN, whole
    q[2, 0, 1, 0] = float("inf")  # the query's own row
    lengths = [4, 6, 0]
    allowed = np.array([[j < n for j in range(6)] for n in lengths])[:, None, None, :]
    q, k, v = (t.requires_grad_(grad) for t in (q, k, v))
    keep = torch.arange(6) < torch.tensor(lengths)[:, None]
    mask = Mask.padding(lengths, 6) if form == "value" else keep[:, None, None, :]
    out, _ = attnlab.attention(q, k, v, mask=mask)
    clean = [np.nan_to_num(t.detach().numpy(), posinf=0.0) for t in (q, k, v)]
    want = _np_attention(*clean, allowed)
    want[1, 1] = np.nan
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-10, atol=1e-12)
    assert torch.all(out[2] == 0)  # an empty sequence: zeros, its NaN query notwithstanding
    if grad:
        torch.where(out.isnan(), 0.0, out).sum().backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        assert torch.all(k.grad[0, :, 4:] == 0) and torch.all(v.grad[0, :, 4:] == 0)


def test_the_rule_dispatches_at_most_eight_operations_for_causal_and_a_padding_value_eleven_for_a_tensor():
    value = Mask.padding(torch.tensor([64, 30]), 64)
    _ops_outside(mask=value)  # the value's plan for this call's shape, made once
    assert len(_ops_outside(mask=value)) <= 7, _ops_outside(mask=value)
    empty = Mask.padding(torch.tensor([64, 0]), 64)  # a sequence with no key: its rows zeroed, one more
    _ops_outside(mask=empty)
    assert len(_ops_outside(mask=empty)) <= 8, _ops_outside(mask=empty)
    for kw in ({"causal": True}, {"mask": Mask.causal()}):
        assert len(_ops_outside(**kw)) <= 8, _ops_outside(**kw)
    # read each call: its padded key rows and its rows that may attend nothing (from one negation), zeroed at the end
    tensor = torch.ones(2, 1, 1, 64, dtype=torch.bool, device="meta")
    assert len(_ops_outside(mask=tensor)) <= 11, _ops_outside(mask=tensor)


class _StubMask:
    """``Mask`` as a model module sees it, with ``padding`` handing back the raw (b, s) tensor: the path before."""

    @staticmethod
    def padding(keep):
        return keep


@pytest.mark.parametrize("decoder,rnn,dropout", [("bahdanau", "gru", 0.0), ("luong", "lstm", 0.0),
                                                 ("bahdanau", "gru", 0.3)])
def test_an_rnn_translator_passes_one_padding_value_to_every_step_and_keeps_its_numbers(monkeypatch, decoder, rnn,
                                                                                        dropout):
    from attnlab.models import seq2seq
    from attnlab.train.decode import beam_search

    torch.manual_seed(0)
    model = seq2seq.Seq2Seq(seq2seq.Seq2SeqConfig(src_vocab=11, tgt_vocab=13, decoder=decoder, rnn=rnn, emb_dim=8,
                                                  hidden=16, attn_dim=16, dropout=dropout)).double()
    model.train(dropout > 0)  # with dropout, teacher forcing runs step by step
    src, tgt = torch.randint(1, 11, (3, 6)), torch.randint(1, 13, (3, 4))
    src_mask = torch.arange(6) < torch.tensor([6, 3, 1])[:, None]
    seen = []
    hook = model.attention.register_forward_pre_hook(lambda mod, a, kw: seen.append(kw["mask"]), with_kwargs=True)

    def run():
        torch.manual_seed(1)
        logits, weights = model(src, src_mask, tgt, need_weights=True)
        memory, state = model.start(src, src_mask)
        steps = [model.step(memory, state, tgt[:, 0])]
        steps.append(model.step(memory, steps[0][1], tgt[:, 1]))
        hyps = beam_search(model.eval(), src, src_mask, beam=2, max_len=4)
        model.train(dropout > 0)
        return [logits, weights, *(x for s in steps for x in (s[0], s[2]))], [h.tokens for h in hyps]

    outs, tokens = run()
    forward_masks, step_masks = seen[:4], seen[4:6]
    assert all(isinstance(m, Mask) for m in seen) and len({id(m) for m in forward_masks}) == 1
    assert forward_masks[0].keys.tolist() == src_mask.tolist()
    assert len({id(m) for m in step_masks}) == 2  # a step is a forward of its own: one value each
    hook.remove()
    monkeypatch.setattr(seq2seq, "Mask", _StubMask)  # every step reads the (b, s) tensor itself, as before
    ref, ref_tokens = run()
    for a, b in zip(outs, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert tokens == ref_tokens
    assert torch.all(outs[1][1, :, 3:] == 0) and torch.all(outs[1][2, :, 1:] == 0)  # no weight on padding


def test_the_transformer_translator_passes_one_padding_value_to_its_encoder_and_decoder(monkeypatch):
    from attnlab.models import transformer_translator as module
    from attnlab.models.transformer import TransformerConfig

    torch.manual_seed(0)
    model = module.TransformerTranslator(TransformerConfig(src_vocab=11, tgt_vocab=13, dim=16, num_heads=2,
                                                           num_encoder_layers=2, num_decoder_layers=2,
                                                           dropout=0.0)).double().eval()
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4))
    src_mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    seen = []
    real_forward = MultiHeadAttention.forward
    monkeypatch.setattr(MultiHeadAttention, "forward", lambda self, *a, **kw: seen.append(kw.get("mask")) or
                        real_forward(self, *a, **kw))
    logits, w = model(src, src_mask, tgt, need_weights=True)
    values = [m for m in seen if isinstance(m, Mask)]
    assert len(values) == 2 + 2 and len({id(m) for m in values}) == 1  # encoder self- and decoder cross-attention
    memory, state = model.start(src, src_mask)
    step_logits, _, step_w = model.step(memory, state, tgt[:, 0])
    monkeypatch.setattr(MultiHeadAttention, "forward", real_forward)
    monkeypatch.setattr(module, "Mask", _StubMask)  # the (b, s) tensor, read by the Transformer per call
    ref, ref_w = model(src, src_mask, tgt, need_weights=True)
    memory, state = model.start(src, src_mask)
    ref_step, _, ref_step_w = model.step(memory, state, tgt[:, 0])
    for a, b in ((logits, ref), (w, ref_w), (step_logits, ref_step), (step_w, ref_step_w)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert torch.all(w[1, :, 3:] == 0)
