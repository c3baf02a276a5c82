"""Linear attention (Katharopoulos et al. 2020) against a float64 loop written from eqs. 5 and 18–20:
the linear, parallel and recurrent forms agree, gradients included; the masking contract."""

from __future__ import annotations

import contract_modern as contract
import numpy as np
import pytest
import torch

from attnlab.functional.linear import linear_attention, linear_attention_step
from attnlab.nn import LinearAttention, create


def phi(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


def reference(q, k, v, causal=False, key_ok=None):
    """V'_i = φ(Q_i)ᵀ Σ_j φ(K_j) V_jᵀ / φ(Q_i)ᵀ Σ_j φ(K_j), j over the allowed keys, as a loop."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for idx in np.ndindex(*q.shape[:-2]):
        for i in range(q.shape[-2]):
            num, den = np.zeros(v.shape[-1]), 0.0
            for j in range(k.shape[-2]):
                if (causal and j > i + k.shape[-2] - q.shape[-2]) or (key_ok is not None and not key_ok[idx[0], j]):
                    continue
                s = phi(q[idx][i]) @ phi(k[idx][j])
                num, den = num + s * v[idx][j], den + s
            out[idx + (i,)] = num / den if den > 0 else 0.0
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_forms_against_loop(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, dtype=torch.float64) for _ in range(3))
    ref = reference(q, k, v, causal)
    out, _ = linear_attention(q, k, v, causal=causal)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-10, atol=1e-12)
    slow, w = linear_attention(q, k, v, causal=causal, need_weights=True)
    np.testing.assert_allclose(slow.numpy(), ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.sum(-1).numpy(), 1.0)
    if causal:
        rec, state = linear_attention_step(q, k, v)
        np.testing.assert_allclose(rec.numpy(), ref, rtol=1e-10, atol=1e-12)
        assert state.s.shape == (2, 3, 4, 4) and state.z.shape == (2, 3, 4) and state.length == 6


def test_recurrent_in_pieces_and_gradients_equal_parallel():
    torch.manual_seed(1)
    args = [torch.randn(1, 2, 9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    par, _ = linear_attention(*args, causal=True)
    a, st = linear_attention_step(*(t[:, :, :4] for t in args))
    b, st = linear_attention_step(*(t[:, :, 4:] for t in args), st)
    rec = torch.cat([a, b], -2)
    torch.testing.assert_close(rec, par)
    g = torch.randn_like(par)
    g1 = torch.autograd.grad((par * g).sum(), args)
    g2 = torch.autograd.grad((rec * g).sum(), args)
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y)
    # against the loop's gradient by finite differences (the reference is float64)
    assert torch.autograd.gradcheck(lambda q, k, v: linear_attention(q, k, v)[0], [t.detach()[:, :, :4].requires_grad_() for t in args])


def test_key_mask_against_loop():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 1, 5, 3, dtype=torch.float64) for _ in range(3))
    ok = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 1, 1]], dtype=torch.bool)
    out, _ = linear_attention(q, k, v, mask=ok[:, None, None, :])
    np.testing.assert_allclose(out.numpy(), reference(q, k, v, key_ok=ok.numpy()), rtol=1e-10)
    with pytest.raises(TypeError, match="bool"):
        linear_attention(q, k, v, mask=torch.zeros(5))


@pytest.mark.parametrize("causal", [False, True])
def test_module_contract_and_state(causal):
    torch.manual_seed(3)
    m = create("linear", dim=8, num_heads=2).double()

    def fn(q, k, v, key_mask, need_weights):  # self-attention: q, k, v are the same positions
        del k, v
        return m(q, mask=key_mask, causal=causal, need_weights=need_weights)

    # the contract on inputs: masked positions' inputs (hence keys and values) are NaN/inf
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 2] = mask[1, 5] = False
    base = m(x, mask=mask, causal=causal)[0]
    mods = x.clone()
    mods[~mask] = float("nan")
    dirty = m(mods, mask=mask, causal=causal)[0]
    torch.testing.assert_close(dirty[mask], base[mask])
    contract.fully_masked_row_is_zero(lambda q, k, v, km, nw: linear_attention(q, k, v, mask=None if km is None else km[:, None, :], causal=causal))
    contract.masked_keys_never_influence(lambda q, k, v, km, nw: linear_attention(q, k, v, mask=km[:, None, :], causal=causal, need_weights=nw))
    contract.empty_input(lambda q, k, v, km, nw: linear_attention(q, k, v, causal=causal))
    w = contract.weights_equal_fast(fn, q=6, k=6)
    assert w.shape == (2, 2, 6, 6)
    if causal:
        st = m.empty_state(2, dtype=torch.float64)
        y1, st = m(x[:, :2], state=st)
        y2, st = m(x[:, 2:], state=st)
        torch.testing.assert_close(torch.cat([y1, y2], 1), m(x, causal=True)[0])
    assert isinstance(m, LinearAttention)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("where", ["query", "key", "value"])
def test_causal_nan_in_a_future_token_reaches_no_earlier_row_or_gradient(where, need_weights):
    """A NaN at position j (in Q, K or V) under ``causal``: rows i < j equal the loop over the
    clean inputs, the rows that see it are NaN (the core's rule), and the gradient of a loss over rows i < j is finite and
    equals the clean run's (it used to spread through 0 · NaN in the parallel form's backward)."""
    torch.manual_seed(5)
    j = 3
    clean = [torch.randn(2, 2, 6, 4, dtype=torch.float64) for _ in range(3)]
    ref = reference(*clean, causal=True)
    rows = (torch.arange(6) < j).view(6, 1)
    grads = []
    for poison in (False, True):
        args = [t.clone() for t in clean]
        if poison:
            args[("query", "key", "value").index(where)][..., j, :] = float("nan")
        args = [t.requires_grad_() for t in args]
        out, _ = linear_attention(*args, causal=True, need_weights=need_weights)
        np.testing.assert_allclose(out[..., :j, :].detach().numpy(), ref[..., :j, :], rtol=1e-10, atol=1e-12)
        if poison:  # a NaN key or value reaches the rows that may attend it; a NaN query only its own row
            assert torch.isnan(out[..., j:, :] if where != "query" else out[..., j, :]).all()
            if where == "query":
                np.testing.assert_allclose(out[..., j + 1:, :].detach().numpy(), ref[..., j + 1:, :], rtol=1e-10)
        loss = torch.where(rows, out, 0.0).sum()
        grads.append(torch.autograd.grad(loss, args))
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
