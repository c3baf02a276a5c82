"""Every classic attention module takes one call shape:
``forward(query, key, value=None, *, mask=None, need_weights=False)`` → ``(out, weights or None)``,
and the old spellings (``keys=``, ``values=``, a positional mask) raise a TypeError naming the new one."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import attnlab

D = 4
KW = {"dot": {}, "scaled-dot": {}, "softcap": {"cap": 5.0}, "bahdanau": {"query_dim": D, "key_dim": D, "attn_dim": 3},
      "luong-dot": {"query_dim": D, "key_dim": D}, "luong-general": {"query_dim": D, "key_dim": D},
      "luong-concat": {"query_dim": D, "key_dim": D}}
CLASSIC = sorted(KW)


def _build(name):
    torch.manual_seed(0)
    return attnlab.create(name, **KW[name]).double().eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, n, D, generator=g, dtype=torch.float64) for n in (3, 5, 5))
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])[:, None, :]  # (b, 1, k)
    return q, k, v, mask


def test_every_registered_module_called_with_query_and_key_is_listed():
    """A registered module whose forward needs ``key`` as its second argument is a classic one."""
    found = []
    for name in attnlab.available():
        params = list(inspect.signature(attnlab.create(name, **KW.get(name, _small(name))).forward).parameters.values())
        if len(params) > 1 and params[1].name == "key" and params[1].default is inspect.Parameter.empty:
            found.append(name)
    assert sorted(found) == CLASSIC


def _small(name):
    if name in ("channel", "cbam", "se", "eca"):
        return {"channels": 8}
    if name == "spatial":
        return {}
    if name == "target-attention":
        return {"dim": 8}
    extra = {"mla": {"kv_latent_dim": 4}, "neighborhood-2d": {"kernel_size": 3}, "gqa": {"num_kv_heads": 1},
             "local": {"window": 2}, "longformer": {"window": 1, "global_indices": [0]},
             "bigbird": {"window": 1, "global_indices": [0], "random_per_row": 1},
             "sparse": {"pattern": attnlab.patterns.sliding_window(2, 0)}}
    return {"dim": 8, "num_heads": 2, **extra.get(name, {})}


@pytest.mark.parametrize("name", CLASSIC)
def test_one_signature(name):
    params = inspect.signature(_build(name).forward).parameters
    P = inspect.Parameter
    first = [(p.name, p.kind, p.default) for p in list(params.values())[:5]]
    assert first == [("query", P.POSITIONAL_OR_KEYWORD, P.empty), ("key", P.POSITIONAL_OR_KEYWORD, P.empty),
                     ("value", P.POSITIONAL_OR_KEYWORD, None), ("mask", P.KEYWORD_ONLY, None),
                     ("need_weights", P.KEYWORD_ONLY, False)]
    assert all(p.kind is P.KEYWORD_ONLY for p in list(params.values())[3:])


@pytest.mark.parametrize("name", CLASSIC)
def test_weights_only_on_request_and_both_paths_agree(name):
    m, (q, k, v, mask) = _build(name), _inputs()
    out, none = m(q, k, v, mask=mask)
    assert none is None
    out_w, w = m(q, k, v, mask=mask, need_weights=True)
    torch.testing.assert_close(out, out_w, rtol=1e-12, atol=1e-12)
    assert w.shape == (2, 3, 5) and torch.all(w[1, :, 3:] == 0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    torch.testing.assert_close(out_w, w @ v)  # c = Σ_j α_j v_j with the given values


@pytest.mark.parametrize("name,scale", [("dot", 1.0), ("luong-dot", 1.0), ("scaled-dot", D**-0.5)])
def test_parameter_free_scores_match_numpy(name, scale):
    m, (q, k, v, mask) = _build(name), _inputs()
    out, w = m(q, k, v, mask=mask, need_weights=True)
    e = np.einsum("bqd,bkd->bqk", q.numpy(), k.numpy()) * scale
    e = np.where(mask.numpy(), e, -np.inf)  # (b, 1, k) over (b, q, k)
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    np.testing.assert_allclose(w.numpy(), a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out.numpy(), a @ v.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", CLASSIC)
def test_value_defaults_to_the_key(name):
    m, (q, k, _, mask) = _build(name), _inputs()
    torch.testing.assert_close(m(q, k, mask=mask)[0], m(q, k, k, mask=mask)[0], rtol=0, atol=0)


@pytest.mark.parametrize("name", CLASSIC)
def test_old_spellings_name_the_new_one(name):
    m, (q, k, v, mask) = _build(name), _inputs()
    with pytest.raises(TypeError, match=r"keys= is now key= \(forward\(query, key, value=None, \*, mask=None"):
        m(q, keys=k)
    with pytest.raises(TypeError, match=r"values= is now value="):
        m(q, k, values=v)
    with pytest.raises(TypeError, match=r"mask and need_weights are keyword-only now \(mask=\.\.\., need_weights=\.\.\.\); "
                                        r"got 4 positional arguments"):
        m(q, k, v, mask)
    with pytest.raises(TypeError, match="got 5 positional arguments"):
        m(q, k, None, mask, True)
