"""``multi_head_attention`` takes its projections as one dict (``ProjectionWeights``): a module's
``projection_weights()`` gives the module's own output; missing or unknown keys, a value that is not a dict and the
keyword form (``w_q=...``) are refused with messages naming what is expected."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import attnlab.nn.multihead
from attnlab.functional import multihead as mh
from attnlab.nn import MultiHeadAttention

EXPECTED = "weights must have the keys w_q, w_k, w_v, w_o and optionally b_q, b_k, b_v, b_o; "


def _weights(rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """Two heads of size 2 on inputs of size 3, d_out = 5."""
    shapes = {"w_q": (4, 3), "w_k": (4, 3), "w_v": (4, 3), "w_o": (5, 4)}
    return {n: torch.tensor(rng.normal(size=s)) for n, s in shapes.items()}


def _np_mha(x: np.ndarray, p: dict[str, np.ndarray], h: int) -> np.ndarray:
    """Vaswani et al. §3.2.2 in float64 NumPy, one batch element (n, d), biases b_* (zero when absent)."""
    b = {n: p.get(n, 0.0) for n in ("b_q", "b_k", "b_v", "b_o")}
    q, k, v = x @ p["w_q"].T + b["b_q"], x @ p["w_k"].T + b["b_k"], x @ p["w_v"].T + b["b_v"]
    d = q.shape[-1] // h
    heads = []
    for i in range(h):
        sl = slice(i * d, (i + 1) * d)
        e = q[:, sl] @ k[:, sl].T / np.sqrt(d)
        a = np.exp(e - e.max(-1, keepdims=True))
        heads.append(a / a.sum(-1, keepdims=True) @ v[:, sl])
    return np.concatenate(heads, -1) @ p["w_o"].T + b["b_o"]


def test_the_module_projection_weights_give_the_module_output_and_both_match_numpy() -> None:
    torch.manual_seed(0)
    m = MultiHeadAttention(16, 4).double().eval()
    with torch.no_grad():
        m.in_proj_bias.normal_()
        m.out_proj.bias.normal_()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    p = m.projection_weights()
    assert set(p) == {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"}
    out, _ = mh.multi_head_attention(x, x, x, p, num_heads=4)
    torch.testing.assert_close(out, m(x)[0], rtol=0, atol=1e-12)
    ref = {n: t.detach().numpy() for n, t in p.items()}
    for i in range(2):
        np.testing.assert_allclose(out[i].detach().numpy(), _np_mha(x[i].numpy(), ref, 4), rtol=1e-10, atol=1e-12)


def test_the_biases_may_be_absent_or_none() -> None:
    rng = np.random.default_rng(0)
    w = _weights(rng)
    x = torch.tensor(rng.normal(size=(1, 3, 3)))
    absent, _ = mh.multi_head_attention(x, x, x, w, num_heads=2)
    nones, _ = mh.multi_head_attention(x, x, x, {**w, "b_q": None, "b_k": None, "b_v": None, "b_o": None}, num_heads=2)
    want = _np_mha(x[0].numpy(), {n: t.numpy() for n, t in w.items()}, 2)
    np.testing.assert_allclose(absent[0].numpy(), want, rtol=1e-10, atol=1e-12)
    assert torch.equal(absent, nones)
    b_o = rng.normal(size=5)
    biased, _ = mh.multi_head_attention(x, x, x, {**w, "b_o": torch.tensor(b_o)}, num_heads=2)
    np.testing.assert_allclose(biased[0].numpy(), want + b_o, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "drop, add, message",
    [
        (("w_o",), {}, "got keys w_q, w_k, w_v; missing: w_o"),
        (("w_k", "w_v"), {}, "got keys w_q, w_o; missing: w_k, w_v"),
        ((), {"b_x": torch.zeros(4)}, "got keys w_q, w_k, w_v, w_o, b_x; unknown: b_x"),
        (("w_q",), {"wq": torch.zeros(4, 3)}, "got keys w_k, w_v, w_o, wq; missing: w_q; unknown: wq"),
    ],
)
def test_missing_or_unknown_keys_are_a_value_error_naming_them_and_the_expected_keys(drop, add, message) -> None:
    w = {n: t for n, t in _weights(np.random.default_rng(1)).items() if n not in drop} | add
    x = torch.randn(1, 2, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="^" + re.escape(EXPECTED + message) + "$"):
        mh.multi_head_attention(x, x, x, w, num_heads=2)


def test_the_keyword_form_is_a_type_error_naming_the_dict_form() -> None:
    w = _weights(np.random.default_rng(2))
    x = torch.randn(1, 2, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"takes the projections as one dict \(ProjectionWeights\): "
                       r"multi_head_attention\(query, key, value, \{'w_q': \.\.\., .*num_heads=h\); "
                       r"got keyword arguments w_k, w_o, w_q, w_v$"):
        mh.multi_head_attention(x, x, x, num_heads=2, **w)
    with pytest.raises(TypeError, match=r"got keyword arguments b_o$"):  # even next to the dict
        mh.multi_head_attention(x, x, x, w, num_heads=2, b_o=torch.zeros(5, dtype=torch.float64))


@pytest.mark.parametrize("weights, given", [(None, "NoneType"), ([torch.zeros(4, 3)] * 4, "list")])
def test_weights_that_are_not_a_dict_are_a_type_error(weights, given) -> None:
    x = torch.randn(1, 2, 3)
    with pytest.raises(TypeError, match=r"weights must be a dict of the projections \(ProjectionWeights\): .*"
                       f"; got {given}$"):
        mh.multi_head_attention(x, x, x, weights, num_heads=2)


def test_projection_weights_is_one_type_reexported_by_the_module_package() -> None:
    assert attnlab.nn.multihead.ProjectionWeights is mh.ProjectionWeights
    assert mh.ProjectionWeights.__required_keys__ == frozenset({"w_q", "w_k", "w_v", "w_o"})
    assert mh.ProjectionWeights.__optional_keys__ == frozenset({"b_q", "b_k", "b_v", "b_o"})
