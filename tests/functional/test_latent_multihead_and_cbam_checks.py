"""Checks and paths of latent attention, multi-head attention and CBAM's feature-map check.

* ``latent_attention`` refuses each wrong up-projection and each unmatched (b, k) / (b, h, q) pair on
  its own (not only when two are wrong at once), with the message naming the shapes given;
* ``multi_head_attention`` reads a (b, q, k) mask as (b, 1, q, k): compared with float64 NumPy written
  from Vaswani et al. §3.2.2 with the mask applied per query row, and with the shape by hand;
* ``repeat_kv`` with one group (every key head serves one query head) is the tensor given, no copy;
* a float bias of the wrong dtype is refused before any step runs (the trace stays empty);
* ``channel_attention`` / ``spatial_attention`` name the feature map when it is not a tensor.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab
from attnlab import masks
from attnlab.functional import multihead as mh
from attnlab.functional.channel import channel_attention, spatial_attention
from attnlab.functional.latent import latent_attention

# ---------------------------------------------------------------- latent_attention's shape checks


def latent_args(b=2, h=2, n_q=3, n_k=4, d_h=3, d_r=2, d_c=5, d_v=2) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return dict(q_content=torch.randn(b, h, n_q, d_h, generator=g), q_rope=torch.randn(b, h, n_q, d_r, generator=g),
                c_kv=torch.randn(b, n_k, d_c, generator=g), k_rope=torch.randn(b, n_k, d_r, generator=g),
                w_uk=torch.randn(h * d_h, d_c, generator=g), w_uv=torch.randn(h * d_v, d_c, generator=g))


def weights_message(w_uk: str, w_uv: str) -> str:
    return ("^" + re.escape("w_uk (h·d_h, d_c) and w_uv (h·d_v, d_c) must act on latents of d_c=5 with h=2; "
                            f"got w_uk {w_uk}, w_uv {w_uv}") + "$")


@pytest.mark.parametrize(
    "name, shape, got_uk, got_uv",
    [
        ("w_uk", (6, 4), "(6, 4)", "(4, 5)"),  # only W^UK acts on latents of another size
        ("w_uv", (4, 4), "(6, 5)", "(4, 4)"),  # only W^UV does
        ("w_uk", (5, 5), "(5, 5)", "(4, 5)"),  # only W^UK's rows do not split into h = 2 heads
        ("w_uv", (5, 5), "(6, 5)", "(5, 5)"),  # only W^UV's rows do not
    ],
)
def test_one_wrong_up_projection_is_refused_with_both_shapes_named(name, shape, got_uk, got_uv):
    a = latent_args()
    a[name] = torch.randn(*shape)
    with pytest.raises(ValueError, match=weights_message(got_uk, got_uv)):
        latent_attention(**a, num_heads=2)


@pytest.mark.parametrize(
    "name, shape, got",
    [
        ("k_rope", (2, 3, 2), ["(2, 4, 5)", "(2, 3, 2)", "(2, 2, 3, 3)", "(2, 2, 3, 2)"]),  # k differs, queries fine
        ("c_kv", (1, 4, 5), ["(1, 4, 5)", "(2, 4, 2)", "(2, 2, 3, 3)", "(2, 2, 3, 2)"]),  # b differs
        ("q_rope", (2, 2, 2, 2), ["(2, 4, 5)", "(2, 4, 2)", "(2, 2, 3, 3)", "(2, 2, 2, 2)"]),  # q differs, keys fine
    ],
)
def test_one_unmatched_pair_is_refused_with_all_four_shapes_named(name, shape, got):
    a = latent_args()
    a[name] = torch.randn(*shape)
    message = ("c_kv (b, k, d_c) and k_rope (b, k, d_R) must share (b, k), q_content and q_rope (b, h, q) ; got "
               + ", ".join(got))
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        latent_attention(**a, num_heads=2)


# ---------------------------------------------------------------- multi_head_attention with a (b, q, k) mask


def np_mha(x_q, x_kv, w, h, allowed):
    """float64 NumPy, per batch, head and query row: softmax over the keys that row may attend."""
    q, k, v = x_q @ w["w_q"].T, x_kv @ w["w_k"].T, x_kv @ w["w_v"].T
    b, n_q, d = q.shape
    d_h = d // h
    heads = np.zeros((b, n_q, d))
    weights = np.zeros((b, h, n_q, x_kv.shape[1]))
    for bi in range(b):
        for hi in range(h):
            sl = slice(hi * d_h, (hi + 1) * d_h)
            for i in range(n_q):
                e = q[bi, i, sl] @ k[bi, :, sl].T / np.sqrt(d_h)
                e = np.where(allowed[bi, i], e, -np.inf)
                p = np.exp(e - e.max())
                p /= p.sum()
                weights[bi, hi, i] = p
                heads[bi, i, sl] = p @ v[bi, :, sl]
    return heads @ w["w_o"].T, weights


def test_a_batch_query_key_mask_is_read_per_query_row_for_every_head():
    g = torch.Generator().manual_seed(7)
    b, n_q, n_k, d, h = 2, 3, 4, 4, 2  # q = 3 differs from h = 2 and from 1
    x_q, x_kv = torch.randn(b, n_q, d, generator=g, dtype=torch.float64), torch.randn(b, n_k, d, generator=g,
                                                                                      dtype=torch.float64)
    w = {n: torch.randn(d, d, generator=g, dtype=torch.float64) for n in ("w_q", "w_k", "w_v", "w_o")}
    allowed = np.array([[[1, 0, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0]],
                        [[0, 0, 0, 1], [1, 1, 1, 1], [0, 1, 0, 1]]], dtype=bool)  # (b, q, k), every row one key at least
    out, weights = mh.multi_head_attention(x_q, x_kv, x_kv, w, num_heads=h, mask=torch.tensor(allowed),
                                           need_weights=True)
    want, want_w = np_mha(x_q.numpy(), x_kv.numpy(), {n: t.numpy() for n, t in w.items()}, h, allowed)
    np.testing.assert_allclose(weights.numpy(), want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)


def test_score_mask_puts_the_head_axis_second_for_a_three_dimensional_mask():
    mask = torch.arange(24).reshape(2, 3, 4) % 3 == 0  # (b, q, k)
    got, padding = masks.score_mask(mask, 2, 3, 4)
    assert not padding
    assert tuple(got.shape) == (2, 1, 3, 4)
    assert torch.equal(got[:, 0], mask)


# ---------------------------------------------------------------- repeat_kv with one group


def test_repeat_kv_with_one_group_returns_the_heads_given_without_a_copy():
    x = torch.randn(2, 3, 4, 5)
    assert mh.repeat_kv(x, 1) is x
    # two groups: each key head serves two consecutive query heads (Ainslie et al. 2023), a new tensor
    y = mh.repeat_kv(x, 2)
    assert tuple(y.shape) == (2, 6, 4, 5)
    for i in range(6):
        assert torch.equal(y[:, i], x[:, i // 2])


# ---------------------------------------------------------------- a wrong float bias fails before any step


def test_a_float_bias_of_the_wrong_dtype_is_refused_before_any_step_is_recorded():
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    w = {n: torch.randn(4, 4, dtype=torch.float64) for n in ("w_q", "w_k", "w_v", "w_o")}
    message = ("a float mask (additive bias) must have the scores' dtype torch.float64; got mask dtype torch.float32 "
               "(convert with mask.to(torch.float64), or pass a bool mask)")
    with attnlab.trace() as t, pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        mh.multi_head_attention(x, x, x, w, num_heads=2, mask=torch.zeros(1, 1, 3, 3))
    assert t.names() == []  # no projection ran: the call was refused at the door
    # the same call with a float64 bias runs and records the projections
    with attnlab.trace() as t:
        mh.multi_head_attention(x, x, x, w, num_heads=2, mask=torch.zeros(1, 1, 3, 3, dtype=torch.float64))
    assert t.names()[:3] == ["projected_query", "projected_keys", "projected_values"]


# ---------------------------------------------------------------- CBAM: the feature map named


def test_channel_and_spatial_attention_name_a_feature_map_that_is_not_a_tensor():
    x = torch.randn(1, 2, 3, 3).tolist()
    with pytest.raises(ValueError, match="^feature map must be a torch.Tensor; got list$"):
        channel_attention(x, torch.randn(1, 2), None, torch.randn(2, 1), None)
    with pytest.raises(ValueError, match="^feature map must be a torch.Tensor; got list$"):
        spatial_attention(x, torch.randn(1, 2, 3, 3))
