"""``MultiHeadAttention`` against ``torch.nn.MultiheadAttention`` (copied weights, float64) on the options that
torch has: unbatched (L, E) inputs, ``add_bias_kv`` and ``add_zero_attn`` (converted by ``from_torch`` and
``to_torch``), and a float bias of another floating dtype than the queries. Outputs, per-head weights and
gradients equal torch's to 1e-10; a fully masked row under ``add_zero_attn`` is checked by hand."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from attnlab.nn import MultiHeadAttention
from attnlab.nn.convert import from_torch, mask_from_torch, to_torch

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # torch warns when its two masks differ in dtype (the float16 + float64 case is exactly that)
    pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask"),
]

TOL = {"atol": 1e-10, "rtol": 0}
EXTRAS = [{"add_bias_kv": True}, {"add_zero_attn": True}, {"add_bias_kv": True, "add_zero_attn": True}]


def _torch_mha(batch_first: bool = True, **kw) -> nn.MultiheadAttention:
    torch.manual_seed(0)
    t = nn.MultiheadAttention(8, 2, batch_first=batch_first, dtype=torch.float64, **kw)
    with torch.no_grad():
        for p in t.parameters():
            p.normal_()
    return t


def _inputs(b: int = 2, q: int = 3, k: int = 4):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, q, 8, generator=g, dtype=torch.float64)
    mem = torch.randn(b, k, 8, generator=g, dtype=torch.float64)
    attn = torch.rand(q, k, generator=g) < 0.4  # torch polarity: True = forbidden
    pad = torch.zeros(b, k, dtype=torch.bool)
    pad[0, -1] = pad[1, 0] = True  # True = padding
    return x, mem, attn, pad


def _theirs(t: nn.MultiheadAttention, q, k, v, **kw):
    """torch's output in batch-first layout and its per-head weights."""
    if not t.batch_first:
        q, k, v = (z.transpose(0, 1) for z in (q, k, v))
    out, w = t(q, k, v, average_attn_weights=False, **kw)
    return (out if t.batch_first else out.transpose(0, 1)), w


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: "+".join(e))
@pytest.mark.parametrize("self_attention", [True, False], ids=["self", "cross"])
def test_extra_keys_give_torchs_outputs_and_weights_with_both_masks(batch_first, extra, self_attention):
    t = _torch_mha(batch_first, **extra)
    m = from_torch(t)
    x, mem, attn, pad = _inputs(k=3 if self_attention else 4)
    kv = x if self_attention else mem
    ref, ref_w = _theirs(t, x, kv, kv, attn_mask=attn, key_padding_mask=pad)
    out, w = m(x, kv, kv, mask=mask_from_torch(attn, pad), need_weights=True)
    extra_cols = len(extra)
    assert w.shape == (2, 2, 3, kv.shape[1] + extra_cols)  # the appended columns are in the weights too
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)
    fused, _ = m(x, kv, kv, mask=mask_from_torch(attn, pad))  # need_weights=False: the fused path
    torch.testing.assert_close(fused, ref, **TOL)


@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: "+".join(e))
def test_extra_keys_with_float_masks_and_causal_give_torchs_outputs(extra):
    t = _torch_mha(**extra)
    m = from_torch(t)
    x, _, _, _ = _inputs()
    bias = torch.randn(3, 3, dtype=torch.float64)
    fpad = torch.tensor([[0.0, -1.5, float("-inf")], [0.0, 0.0, 0.0]], dtype=torch.float64)
    ref, ref_w = _theirs(t, x, x, x, attn_mask=bias, key_padding_mask=fpad)
    out, w = m(x, mask=mask_from_torch(bias, fpad), need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)
    # causal covers the real keys only: the appended columns stay open, as torch's causal attn_mask leaves them
    forbid = torch.ones(3, 3, dtype=torch.bool).triu(1)
    ref, ref_w = _theirs(t, x, x, x, attn_mask=forbid)
    out, w = m(x, causal=True, need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)


def test_a_row_whose_keys_are_all_masked_attends_the_zero_row_only():
    """add_zero_attn, every real key masked for query 0: softmax([-inf, -inf, -inf, 0]) = [0, 0, 0, 1], the
    context is the zero value row, so the output is the output projection's bias (by hand), as in torch."""
    t = _torch_mha(add_zero_attn=True)
    m = from_torch(t)
    x, _, _, _ = _inputs()
    keep = torch.ones(3, 3, dtype=torch.bool)
    keep[0] = False
    out, w = m(x, mask=keep, need_weights=True)
    torch.testing.assert_close(w[:, :, 0], torch.tensor([0.0, 0, 0, 1], dtype=torch.float64).expand(2, 2, 4), **TOL)
    torch.testing.assert_close(out[:, 0], t.out_proj.bias.detach().expand(2, 8), **TOL)
    ref, ref_w = _theirs(t, x, x, x, attn_mask=~keep)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: "+".join(e))
def test_round_trip_to_torch_gives_torchs_numbers_and_parameters(batch_first, extra):
    t = _torch_mha(batch_first, **extra)
    back = to_torch(from_torch(t), batch_first=batch_first)
    assert (back.bias_k is not None) == ("add_bias_kv" in extra) and back.add_zero_attn == ("add_zero_attn" in extra)
    for name, p in t.named_parameters():
        assert torch.equal(dict(back.named_parameters())[name], p), name
    x, mem, attn, pad = _inputs()
    ref, ref_w = _theirs(t, x, mem, mem, attn_mask=attn, key_padding_mask=pad)
    got, got_w = _theirs(back, x, mem, mem, attn_mask=attn, key_padding_mask=pad)
    torch.testing.assert_close(got, ref, **TOL)
    torch.testing.assert_close(got_w, ref_w, **TOL)


def test_a_module_built_with_the_options_converts_to_torch():
    m = MultiHeadAttention(8, 2, add_bias_kv=True, add_zero_attn=True).double()
    assert m.bias_k is not None and m.bias_k.shape == (1, 1, 8) and m.bias_v is not None
    assert "add_bias_kv=True, add_zero_attn=True" in repr(m)
    t = to_torch(m)
    x, mem, _, _ = _inputs()
    ref, ref_w = _theirs(t, x, mem, mem)
    out, w = m(x, mem, mem, need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)


def test_bias_k_and_bias_v_get_torchs_gradients():
    t = _torch_mha(add_bias_kv=True, add_zero_attn=True)
    m = from_torch(t)
    x, mem, attn, pad = _inputs()
    up = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    ref, _ = _theirs(t, x, mem, mem, attn_mask=attn, key_padding_mask=pad)
    (ref * up).sum().backward()
    out, _ = m(x, mem, mem, mask=mask_from_torch(attn, pad))
    (out * up).sum().backward()
    for name in ("bias_k", "bias_v", "in_proj_weight", "out_proj.weight"):
        theirs, ours = dict(t.named_parameters())[name].grad, dict(m.named_parameters())[name].grad
        assert theirs is not None and ours is not None and theirs.abs().sum() > 0, name
        torch.testing.assert_close(ours, theirs, **TOL)


@pytest.mark.parametrize("extra", [{}, *EXTRAS], ids=lambda e: "+".join(e) or "plain")
@pytest.mark.parametrize("masked", [False, True])
def test_unbatched_inputs_give_torchs_unbatched_outputs(extra, masked):
    t = _torch_mha(**extra)
    m = from_torch(t)
    x, mem, attn, pad = _inputs()
    x, mem, pad = x[0], mem[0], pad[0]  # (L, E), (S, E), (S,)
    theirs_kw = {"attn_mask": attn, "key_padding_mask": pad} if masked else {}
    mask = mask_from_torch(attn, pad) if masked else None
    ref, ref_w = t(x, mem, mem, average_attn_weights=False, **theirs_kw)
    out, w = m(x, mem, mem, mask=mask, need_weights=True)
    assert out.shape == (3, 8) and w.shape == (2, 3, 4 + len(extra))
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)
    _, avg = t(x, mem, mem, **theirs_kw)  # torch's default: averaged over the heads, (L, S)
    torch.testing.assert_close(w.mean(0), avg, **TOL)


def test_unbatched_self_attention_with_the_short_masks():
    """m(x) on (L, E) with attnlab's short forms: a (S,) key mask and an (L, S) mask, True = may attend."""
    t = _torch_mha()
    m = from_torch(t)
    x = _inputs()[0][0]
    keys = torch.tensor([True, False, True])
    ref, ref_w = t(x, x, x, key_padding_mask=~keys, average_attn_weights=False)
    out, w = m(x, mask=keys, need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)
    allow = torch.tensor([[True, False, False], [True, True, False], [False, True, True]])
    ref, ref_w = t(x, x, x, attn_mask=~allow, average_attn_weights=False)
    out, w = m(x, mask=allow, need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(w, ref_w, **TOL)
    out, w = m(x, need_weights=False)
    assert w is None and out.shape == (3, 8)


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_float16_bias_with_float64_queries_is_converted_to_float64(need_weights):
    t = _torch_mha()
    m = from_torch(t)
    x, mem, _, _ = _inputs()
    bias16 = torch.randn(3, 4, generator=torch.Generator().manual_seed(3)).half()
    ref, _ = _theirs(t, x, mem, mem, attn_mask=bias16.double())  # the same bias, converted by hand
    out, w = m(x, mem, mem, mask=bias16, need_weights=need_weights)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref, **TOL)
    # torch adds a float16 attn_mask and a float64 key_padding_mask in float64: so does mask_from_torch
    fpad = torch.tensor([[0.0, -2.0, 0.5, 0.0], [float("-inf"), 0.0, 0.0, 1.0]], dtype=torch.float64)
    ref, _ = _theirs(t, x, mem, mem, attn_mask=bias16, key_padding_mask=fpad)
    combined = mask_from_torch(bias16, fpad)
    assert combined is not None and combined.dtype == torch.float64
    out, _ = m(x, mem, mem, mask=combined, need_weights=need_weights)
    torch.testing.assert_close(out, ref, **TOL)


def test_a_float64_bias_with_float32_queries_is_converted_to_float32():
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    bias = torch.randn(3, 3, dtype=torch.float64)
    out, w = m(x, mask=bias, need_weights=True)
    want, want_w = m(x, mask=bias.float(), need_weights=True)
    assert out.dtype == torch.float32 and w is not None and w.dtype == torch.float32
    torch.testing.assert_close(out, want, atol=0, rtol=0)
    torch.testing.assert_close(w, want_w, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("args", "shapes"),
    [
        (((3, 8), (2, 4, 8)), "query (3, 8), key (2, 4, 8)"),
        (((2, 3, 8), (4, 8)), "query (2, 3, 8), key (4, 8)"),
        (((3, 8), (4, 8), (2, 4, 8)), "query (3, 8), key (4, 8), value (2, 4, 8)"),
    ],
)
def test_mixing_batched_and_unbatched_inputs_names_every_shape(args, shapes):
    m = MultiHeadAttention(8, 2)
    msg = f"query, key and value must all be batched (b, n, d) or all unbatched (n, d); got {shapes}"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        m(*(torch.randn(*s) for s in args))


def test_unbatched_errors_name_what_was_given():
    m = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=re.escape("query must be (b, q, dim) or unbatched (q, dim) with dim=8; "
                                                   "got shape (3, 7)")):
        m(torch.randn(3, 7))
    with pytest.raises(ValueError, match=r"2-D mask of shape \(3, 5\) does not broadcast"):
        m(torch.randn(3, 8), mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"add_bias_kv and add_zero_attn .* work without a sparse or context-parallel backend, "
                                         r"rope and alibi; got .*rope=True"):
        MultiHeadAttention(8, 2, add_bias_kv=True, rope=True)
