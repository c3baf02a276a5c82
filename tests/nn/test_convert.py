"""Converters between attnlab.nn.MultiHeadAttention and torch.nn.MultiheadAttention: every refusal with
its exact message, every weight that copies (separate kdim/vdim weights, torch's unpacked weights for
kdim = vdim = dim, no biases, float64, train/eval mode), checked against torch's own module with the
copied weights, and mask translation against masks written by hand."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from attnlab.nn import MultiHeadAttention
from attnlab.nn.convert import from_torch, mask_from_torch, mask_to_torch, to_torch

pytestmark = pytest.mark.usefixtures("one_thread")


def _randomised(t: nn.MultiheadAttention) -> nn.MultiheadAttention:
    with torch.no_grad():
        for p in t.parameters():
            p.normal_()
    return t


def _same_outputs(ours: MultiHeadAttention, theirs: nn.MultiheadAttention, q, k, v) -> None:
    ref, ref_w = theirs(q, k, v, need_weights=True, average_attn_weights=False)
    out, w = ours(q, k, v, need_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-10, rtol=0)


def test_from_torch_refuses_other_modules():
    with pytest.raises(ValueError, match=r"^from_torch expects a torch.nn.MultiheadAttention; got Linear$"):
        from_torch(nn.Linear(2, 2))


def test_from_torch_copies_separate_weights_in_float64_and_keeps_the_mode():
    torch.manual_seed(3)
    t = _randomised(nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True, dtype=torch.float64)).eval()
    m = from_torch(t)
    assert not m.packed and m.in_proj_weight is None
    assert m.q_proj_weight.dtype == torch.float64 and not m.training
    q, k, v = (torch.randn(2, n, d, dtype=torch.float64) for n, d in ((3, 8), (4, 5), (4, 3)))
    _same_outputs(m, t, q, k, v)
    assert from_torch(t.train()).training
    assert from_torch(t.eval()).training is False


def test_from_torch_packs_torchs_separate_weights_when_kdim_equals_dim():
    torch.manual_seed(4)
    t = _randomised(nn.MultiheadAttention(8, 2, kdim=8, vdim=8, batch_first=True, dtype=torch.float64))
    t._qkv_same_embed_dim = False  # torch keeps q/k/v_proj_weight separately when kdim/vdim were given
    if t.in_proj_weight is not None:  # torch versions that pack anyway: make it separate by hand
        w = t.in_proj_weight.detach()
        t.q_proj_weight = nn.Parameter(w[:8].clone())
        t.k_proj_weight = nn.Parameter(w[8:16].clone())
        t.v_proj_weight = nn.Parameter(w[16:].clone())
        t.register_parameter("in_proj_weight", None)
    t.eval()
    m = from_torch(t)
    assert m.packed and m.in_proj_weight.dtype == torch.float64
    want = torch.cat([t.q_proj_weight, t.k_proj_weight, t.v_proj_weight])
    assert torch.equal(m.in_proj_weight, want)
    assert torch.equal(m.in_proj_bias, t.in_proj_bias) and torch.equal(m.out_proj.bias, t.out_proj.bias)
    assert torch.equal(m.out_proj.weight, t.out_proj.weight)


def test_from_torch_without_biases():
    torch.manual_seed(5)
    t = _randomised(nn.MultiheadAttention(8, 2, bias=False, batch_first=True, dtype=torch.float64)).eval()
    m = from_torch(t)
    assert m.in_proj_bias is None and m.out_proj.bias is None
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    _same_outputs(m, t, x, x, x)


def test_from_torch_copies_dropout():
    m = from_torch(nn.MultiheadAttention(8, 2, dropout=0.25))
    assert m.attn_drop == 0.25


def test_to_torch_refusals_name_what_was_given():
    with pytest.raises(ValueError, match=r"^to_torch expects an attnlab.nn.MultiHeadAttention; got Linear$"):
        to_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=re.escape(
        "torch.nn.MultiheadAttention has no grouped-query heads; this module has num_kv_heads=2 < num_heads=4"
    )):
        to_torch(MultiHeadAttention(16, 4, num_kv_heads=2))
    msg = "^torch.nn.MultiheadAttention has no rotary or ALiBi positions; convert a module without them$"
    for kw in ({"rope": True}, {"alibi": True}):
        with pytest.raises(ValueError, match=msg):
            to_torch(MultiHeadAttention(16, 4, **kw))
    for kw, flags in (({"qkv_bias": False}, "qkv_bias=False, proj_bias=True"),
                      ({"proj_bias": False}, "qkv_bias=True, proj_bias=False")):
        with pytest.raises(ValueError, match=re.escape(
            "torch.nn.MultiheadAttention has one bias flag for in- and output projections; this module has " + flags
        )):
            to_torch(MultiHeadAttention(16, 4, **kw))


@pytest.mark.parametrize("kw", [{}, {"kdim": 5, "vdim": 3}, {"qkv_bias": False, "proj_bias": False}])
def test_to_torch_copies_every_weight_and_keeps_dtype_mode_and_dropout(kw):
    torch.manual_seed(6)
    m = MultiHeadAttention(8, 2, attn_drop=0.125, **kw).double()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_()
    t = to_torch(m)
    assert t.batch_first and t.dropout == 0.125 and t.training
    assert t.out_proj.weight.dtype == torch.float64
    assert (t.in_proj_bias is None) == ("qkv_bias" in kw) and (t.out_proj.bias is None) == ("qkv_bias" in kw)
    m.eval()
    t = to_torch(m)
    assert not t.training
    q = torch.randn(2, 3, 8, dtype=torch.float64)
    k = torch.randn(2, 4, m.kdim, dtype=torch.float64)
    v = torch.randn(2, 4, m.vdim, dtype=torch.float64)
    _same_outputs(m, t, q, k, v)
    t_seq = to_torch(m, batch_first=False)
    assert not t_seq.batch_first
    ref, _ = t_seq(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
    torch.testing.assert_close(m(q, k, v)[0], ref.transpose(0, 1), atol=1e-10, rtol=0)


def test_mask_from_torch_written_by_hand():
    forbid = torch.tensor([[False, True], [False, False]])  # torch: True = not allowed
    assert torch.equal(mask_from_torch(forbid), torch.tensor([[True, False], [True, True]]))
    bias = torch.tensor([[0.0, -1.0], [2.0, 0.5]])
    assert torch.equal(mask_from_torch(bias), bias)  # float: additive, unchanged
    pad = torch.tensor([[False, True], [False, False]])  # (b, k) True = padding
    got = mask_from_torch(key_padding_mask=pad)
    assert got.shape == (2, 1, 1, 2)
    assert torch.equal(got[:, 0, 0], torch.tensor([[True, False], [True, True]]))
    fpad = torch.tensor([[0.0, -3.0], [1.0, 0.0]])
    got = mask_from_torch(key_padding_mask=fpad)
    assert got.shape == (2, 1, 1, 2) and torch.equal(got[:, 0, 0], fpad)
    assert mask_from_torch() is None
    # both: an allowed pair must be allowed by both masks
    both = mask_from_torch(forbid, pad)
    want = torch.tensor([[True, False], [True, True]])[None, None] & torch.tensor([[True, False], [True, True]])[:, None, None]
    assert torch.equal(both, want)


def test_mask_from_torch_three_d_needs_heads_and_unflattens_batch_first():
    m3 = torch.zeros(2 * 3, 4, 5, dtype=torch.bool)
    m3[1, 2, 3] = True  # batch 0, head 1, query 2, key 3 forbidden
    m3[5, 0, 0] = True  # batch 1, head 2
    with pytest.raises(ValueError, match=r"^a 3-D attn_mask is \(b·h, q, k\): pass num_heads to unflatten it$"):
        mask_from_torch(m3)
    got = mask_from_torch(m3, num_heads=3)
    assert got.shape == (2, 3, 4, 5)
    assert (~got).nonzero().tolist() == [[0, 1, 2, 3], [1, 2, 0, 0]]
    f3 = torch.arange(6 * 2 * 2, dtype=torch.float32).view(6, 2, 2)
    assert torch.equal(mask_from_torch(f3, num_heads=2), f3.view(3, 2, 2, 2))
    # a 4-D mask is passed through as is (not unflattened)
    m4 = torch.zeros(1, 1, 2, 2, dtype=torch.bool)
    assert torch.equal(mask_from_torch(m4, num_heads=1), ~m4)


def test_mask_to_torch_flips_bool_only():
    m = torch.tensor([True, False])
    assert torch.equal(mask_to_torch(m), torch.tensor([False, True]))
    f = torch.tensor([0.0, -2.0])
    assert torch.equal(mask_to_torch(f), f)
