"""The thin modules of ``attnlab.nn``: dot-product and soft-capped attention and the attentional
output layer, against float64 NumPy written from the formulas
(Vaswani et al. 2017; Gemma 2's c·tanh(e/c); Luong et al. 2015 eqs. 5–6) and values by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.nn import AttentionalOutput, DotProductAttention, SoftcapAttention
from attnlab.nn import registry as R


def t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def np_attend(e, v, ok=None):
    if ok is not None:
        e = np.where(ok, e, -np.inf)
    w = np.exp(e - e.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return w @ v, w


def message(call, exc=ValueError):
    with pytest.raises(exc) as e:
        call()
    return str(e.value)


# --- DotProductAttention -----------------------------------------------------------------------------


def test_dot_product_defaults_and_message():
    m = DotProductAttention()
    assert m.scaled is True and m.scale is None and m.attn_drop == 0.0
    assert m.extra_repr() == "scaled=True, scale=None, attn_drop=0.0"
    assert DotProductAttention(scaled=False, attn_drop=0.1).extra_repr() == "scaled=False, scale=None, attn_drop=0.1"
    assert DotProductAttention(scale=0.5).extra_repr() == "scaled=True, scale=0.5, attn_drop=0.0"
    assert message(lambda: DotProductAttention(scaled=False, scale=0.5)) == "scale applies only with scaled=True"
    assert isinstance(R.create("dot"), DotProductAttention) and R.create("dot").scaled is False
    assert R.create("scaled-dot").scaled is True


@pytest.mark.parametrize("kw,factor", [({}, 1 / math.sqrt(4)), ({"scaled": False}, 1.0), ({"scale": 0.3}, 0.3)])
def test_dot_product_against_numpy(kw, factor):
    m = DotProductAttention(**kw)
    q, k, v = t(2, 3, 4), t(2, 5, 4, seed=1), t(2, 5, 2, seed=2)
    ok = np.array([True, True, False, True, True])
    mask = torch.from_numpy(ok)
    e = np.einsum("bqd,bkd->bqk", q.numpy(), k.numpy()) * factor
    ref_o, ref_w = np_attend(e, v.numpy(), ok)
    o, w = m(q, k, v, mask=mask, need_weights=True)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-13)
    np.testing.assert_allclose(o.numpy(), ref_o, atol=1e-13)
    o_fast, none = m(q, k, v, mask=mask)
    assert none is None
    np.testing.assert_allclose(o_fast.numpy(), ref_o, atol=1e-13)
    o_self, _ = m(q, k)  # value defaults to the key
    np.testing.assert_allclose(o_self.numpy(), np_attend(e, k.numpy())[0], atol=1e-13)
    o_c, w_c = m(q, k[:, :3], v[:, :3], causal=True, need_weights=True)
    np.testing.assert_allclose(w_c.numpy(), np_attend(e[:, :, :3], v[:, :3].numpy(), np.tril(np.ones((3, 3), bool)))[1], atol=1e-13)


def test_dot_product_dropout_only_in_training():
    m = DotProductAttention(attn_drop=0.5)
    q, k = t(1, 6, 4), t(1, 6, 4, seed=1)
    m.eval()
    clean = m(q, k)[0]
    np.testing.assert_allclose(clean.numpy(), np_attend(q[0].numpy() @ k[0].numpy().T / 2, k[0].numpy())[0][None], atol=1e-13)
    m.train()
    assert not torch.allclose(m(q, k)[0], clean)


# --- SoftcapAttention ----------------------------------------------------------------------------------


def test_softcap_defaults_and_message():
    m = SoftcapAttention()
    assert m.cap == 50.0 and m.scale is None and m.attn_drop == 0.0
    assert m.extra_repr() == "cap=50.0, scale=None"
    assert SoftcapAttention(cap=2, scale=0.5).extra_repr() == "cap=2.0, scale=0.5"
    assert message(lambda: SoftcapAttention(cap=0.0)) == "cap must be a positive number (Gemma 2 uses 50.0 for attention); got 0.0"
    assert isinstance(R.create("softcap"), SoftcapAttention)


@pytest.mark.parametrize("cap,scale", [(50.0, None), (1.5, None), (0.7, 2.0)])
def test_softcap_against_numpy(cap, scale):
    m = SoftcapAttention(cap=cap, scale=scale) if scale is not None else SoftcapAttention(cap=cap)
    q, k, v = t(2, 3, 4) * 3, t(2, 5, 4, seed=1) * 3, t(2, 5, 2, seed=2)
    s = 1 / math.sqrt(4) if scale is None else scale
    e = cap * np.tanh(np.einsum("bqd,bkd->bqk", q.numpy(), k.numpy()) * s / cap)
    ok = np.array([[True, False, True, True, True], [True, True, True, True, False]])
    ref_o, ref_w = np_attend(e, v.numpy(), ok[:, None, :])
    o, w = m(q, k, v, mask=torch.from_numpy(ok)[:, None, :], need_weights=True)
    np.testing.assert_allclose(w.numpy(), ref_w, atol=1e-13)
    np.testing.assert_allclose(o.numpy(), ref_o, atol=1e-13)
    assert m(q, k, v)[1] is None
    np.testing.assert_allclose(m(q, k)[0].numpy(), np_attend(e, k.numpy())[0], atol=1e-13)
    _, w_c = m(q, k[:, :3], v[:, :3], causal=True, need_weights=True)
    np.testing.assert_allclose(w_c.numpy(), np_attend(e[:, :, :3], v[:, :3].numpy(), np.tril(np.ones((3, 3), bool)))[1], atol=1e-13)


def test_softcap_dropout_only_in_training():
    m = SoftcapAttention(cap=5.0, attn_drop=0.5)
    assert m.attn_drop == 0.5
    q, k = t(1, 6, 4), t(1, 6, 4, seed=1)
    m.eval()
    clean = m(q, k)[0]
    e = 5.0 * np.tanh(q[0].numpy() @ k[0].numpy().T / 2 / 5.0)
    np.testing.assert_allclose(clean.numpy(), np_attend(e, k[0].numpy())[0][None], atol=1e-13)  # no dropout in eval
    m.train()
    assert not torch.allclose(m(q, k)[0], clean)


# --- AttentionalOutput ---------------------------------------------------------------------------------


def test_attentional_output_layers_and_dropout():
    torch.manual_seed(0)
    m = AttentionalOutput(3, 2, 4, 5).double()
    assert m.combine.weight.shape == (4, 5) and m.combine.bias.shape == (4,)
    assert m.predict.weight.shape == (5, 4) and m.predict.bias.shape == (5,)
    assert m.dropout.p == 0.0
    c, s = t(2, 3), t(2, 2, seed=1)
    h, logits = m(c, s)
    Wc, bc = m.combine.weight.detach().numpy(), m.combine.bias.detach().numpy()
    ref_h = np.tanh(np.concatenate([c.numpy(), s.numpy()], 1) @ Wc.T + bc)  # h̃ = tanh(W_c [c; s] + b_c)
    np.testing.assert_allclose(h.detach().numpy(), ref_h, atol=1e-13)
    np.testing.assert_allclose(logits.detach().numpy(),
                               ref_h @ m.predict.weight.detach().numpy().T + m.predict.bias.detach().numpy(), atol=1e-13)
    d = AttentionalOutput(3, 2, 64, 5, dropout=0.5).double()
    assert d.dropout.p == 0.5
    h_train, l_train = d(c, s)
    d.eval()
    h_eval, l_eval = d(c, s)
    torch.testing.assert_close(h_train, h_eval)  # the dropout sits between h̃ and W_s only
    assert not torch.allclose(l_train, l_eval)


class _Probe(torch.nn.Module):
    def __init__(self, a=1, b=2):
        super().__init__()
        self.a, self.b = a, b
