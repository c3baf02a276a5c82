"""MLA's latent attention: NaN or inf latents where the mask forbids reach no output and no gradient,
the up-projections' W^UK and W^UV included (0 · NaN in their backward used to make them NaN).

Reference, written here in float64 torch: keys [W^UK c; k^R] and values W^UV c per head, scores over
√(d_h + d_R), −∞ where masked, softmax (a row with no key: zeros), weighted sum, on the clean input.
"""

from __future__ import annotations

import pytest
import torch

from attnlab.functional.latent import latent_attention

B, H, Q, K, DC, DH, DR = 2, 2, 3, 5, 4, 3, 2


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return {"q_content": r(B, H, Q, DH), "q_rope": r(B, H, Q, DR), "c_kv": r(B, K, DC), "k_rope": r(B, K, DR),
            "w_uk": r(H * DH, DC), "w_uv": r(H * DH, DC)}


def _reference(x, allow):
    b, k = x["c_kv"].shape[:2]
    keys = (x["c_kv"] @ x["w_uk"].T).view(b, k, H, DH).transpose(1, 2)
    keys = torch.cat([keys, x["k_rope"][:, None].expand(b, H, k, DR)], -1)
    values = (x["c_kv"] @ x["w_uv"].T).view(b, k, H, DH).transpose(1, 2)
    query = torch.cat([x["q_content"], x["q_rope"]], -1)
    s = (query @ keys.transpose(-1, -2) / (DH + DR) ** 0.5).masked_fill(~allow, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ values


def _grads(out, x, g):
    return dict(zip(x, torch.autograd.grad((out * g).sum(), list(x.values()))))


def _leaves(x):
    return {n: t.clone().requires_grad_() for n, t in x.items()}


CASES = {"padding": (torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool), False),
         "causal": (None, True)}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_non_finite_latents_at_masked_positions_reach_no_gradient(case, poison):
    pad, causal = CASES[case]
    clean = _inputs()
    if causal:
        allow = torch.ones(Q, K, dtype=torch.bool).tril(K - Q)[None, None]  # bottom-right aligned
        forbidden = torch.zeros(B, K, dtype=torch.bool)
        forbidden[:, K - 1] = True  # the last key: every query but the last may not attend it
        rows = torch.arange(Q) < Q - 1  # the rows compared
    else:
        allow, forbidden, rows = pad[:, None, None, :], ~pad, torch.ones(Q, dtype=torch.bool)
    dirty = dict(clean)
    dirty["c_kv"] = clean["c_kv"].masked_fill(forbidden[..., None], poison)
    g = torch.linspace(-1, 1, B * H * Q * DH, dtype=torch.float64).view(B, H, Q, DH) * rows[:, None]
    x = _leaves(dirty)
    mask = None if causal else pad[:, None, None, :]
    out, _ = latent_attention(x["q_content"], x["q_rope"], x["c_kv"], x["k_rope"], x["w_uk"], x["w_uv"],
                              num_heads=H, mask=mask, causal=causal)
    got = _grads(torch.where(rows[:, None], out, 0.0), x, g)
    r = _leaves(clean)
    want_out = _reference(r, allow)
    want = _grads(want_out, r, g)
    torch.testing.assert_close(out[:, :, rows], want_out[:, :, rows].detach(), rtol=0, atol=1e-12)
    for name in got:
        assert torch.isfinite(got[name]).all(), name
        a, b = got[name], want[name]
        if name == "c_kv":  # the forbidden latents' own gradient is zero
            a, b = a[~forbidden], b[~forbidden]
            assert torch.equal(got[name][forbidden], torch.zeros_like(got[name][forbidden]))
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=name)


def test_a_non_finite_latent_a_row_may_attend_makes_that_row_nan():
    x = _inputs(1)
    x["c_kv"][0, 1] = float("nan")  # allowed for every row of sequence 0
    pad = torch.ones(B, K, dtype=torch.bool)
    pad[1, 1] = False  # ... and forbidden in sequence 1
    x["c_kv"][1, 1] = float("nan")
    out, _ = latent_attention(*x.values(), num_heads=H, mask=pad[:, None, None, :])
    assert torch.isnan(out[0]).all()
    clean = _inputs(1)
    torch.testing.assert_close(out[1], _reference(clean, pad[:, None, None, :])[1], rtol=0, atol=1e-12)
