"""Rollout, flow and gradient rollout against matrices worked out by hand (2 layers, 3 tokens),
max-flow against brute-force minimum cuts, and properties (rows sum to 1, flow ≤ cut capacities)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from attnlab.interpret import flow, grad_rollout, layer_matrices, max_flow, rollout

A1 = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]
A2 = [[0.6, 0.4, 0.0], [0.1, 0.2, 0.7], [0.0, 0.5, 0.5]]


def stack(*layers):  # each (n, n) or (h, n, n) → (layers, h, n, n)
    return np.array([np.array(a, dtype=float).reshape(-1, 3, 3) for a in layers])


def test_rollout_by_hand_with_residual():
    # A1 = one-hot rows → Â1 = 0.5·A1 + 0.5·I = [[1,0,0],[.5,.5,0],[0,.5,.5]] (rows already sum to 1)
    # A2 → Â2 = [[1,0,0],[0,1,0],[.5,0,.5]]
    # R = Â2 Â1: row 0 = Â1[0]; row 1 = Â1[1]; row 2 = .5·Â1[0] + .5·Â1[2] = [.5, .25, .25]
    a = stack([[1, 0, 0], [1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0], [1, 0, 0]])
    expected = [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]
    np.testing.assert_allclose(rollout(a), expected, atol=1e-12)
    # without the residual: R = A2 A1 = [[1,0,0],[1,0,0],[1,0,0]]
    np.testing.assert_allclose(rollout(a, residual=False), [[1, 0, 0]] * 3, atol=1e-12)
    # torch input gives the same
    np.testing.assert_allclose(rollout(torch.tensor(a, dtype=torch.float32)), expected, atol=1e-7)


def test_head_fusion_by_hand():
    heads = stack([[[1, 0, 0], [1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0], [0, 0, 1]]])  # 1 layer, 2 heads
    # mean = [[1,0,0],[.5,.5,0],[0,.5,.5]] → 0.5·mean + 0.5·I = [[1,0,0],[.25,.75,0],[0,.25,.75]]
    np.testing.assert_allclose(rollout(heads), [[1, 0, 0], [0.25, 0.75, 0], [0, 0.25, 0.75]], atol=1e-12)
    # max = [[1,0,0],[1,1,0],[0,1,1]] → [[1,0,0],[.5,1,0],[0,.5,1]] → rows renormalised
    np.testing.assert_allclose(rollout(heads, head_fusion="max"),
                               [[1, 0, 0], [1 / 3, 2 / 3, 0], [0, 1 / 3, 2 / 3]], atol=1e-12)
    # min = [[1,0,0],[0,0,0],[0,0,0]] → [[1,0,0],[0,.5,0],[0,0,.5]] → I
    np.testing.assert_allclose(rollout(heads, head_fusion="min"), np.eye(3), atol=1e-12)
    with pytest.raises(ValueError, match="head_fusion"):
        rollout(heads, head_fusion="median")


def test_flow_by_hand_two_layers():
    # In a 2-layer graph every path i → j → k is edge-disjoint, so flow[i, k] = Σ_j min(A2[i, j], A1[j, k]):
    # flow[0,0] = min(.6,1) + min(.4,.5) + min(0,.2) = 1.0     flow[0,1] = 0 + min(.4,.5) + 0 = .4    flow[0,2] = 0
    # flow[1,0] = .1 + .2 + min(.7,.2) = .5   flow[1,1] = 0 + .2 + min(.7,.3) = .5   flow[1,2] = min(.7,.5) = .5
    # flow[2,0] = 0 + min(.5,.5) + min(.5,.2) = .7   flow[2,1] = .5 + .3 = .8   flow[2,2] = min(.5,.5) = .5
    expected = [[1.0, 0.4, 0.0], [0.5, 0.5, 0.5], [0.7, 0.8, 0.5]]
    np.testing.assert_allclose(flow(stack(A1, A2), residual=False), expected, atol=1e-12)


def test_flow_by_hand_with_residual():
    # One layer: the only path (1, i) → (0, j) is the edge itself, so flow = Â = 0.5·A1 + 0.5·I.
    np.testing.assert_allclose(flow(stack(A1)), 0.5 * np.array(A1) + 0.5 * np.eye(3), atol=1e-12)


def test_grad_rollout_by_hand():
    g1 = [[1, 1, 1], [2, -1, 0], [0, 0, -1]]
    # (G1 ⊙ A1)⁺ = [[1,0,0],[1,0,0],[0,0,0]]; Ā1 = I + that = [[2,0,0],[1,1,0],[0,0,1]] (not renormalised)
    g2 = [[0, 0, 0], [0, 0, 0], [0, 2, 2]]
    # (G2 ⊙ A2)⁺ = [[0,0,0],[0,0,0],[0,1,1]]; Ā2 = [[1,0,0],[0,1,0],[0,1,2]]
    # R = Ā2 Ā1: row 0 = [2,0,0]; row 1 = [1,1,0]; row 2 = 1·[1,1,0] + 2·[0,0,1] = [1,1,2]
    expected = [[2, 0, 0], [1, 1, 0], [1, 1, 2]]
    np.testing.assert_allclose(grad_rollout(stack(A1, A2), stack(g1, g2)), expected, atol=1e-12)
    # a second head with zero gradient halves E_h[...]: Ā1 = [[1.5,0,0],[.5,1,0],[0,0,1]]
    two = grad_rollout(np.concatenate([stack(A1), stack(A1)], 1), np.concatenate([stack(g1), np.zeros((1, 1, 3, 3))], 1))
    np.testing.assert_allclose(two, [[1.5, 0, 0], [0.5, 1, 0], [0, 0, 1]], atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        grad_rollout(stack(A1, A2), stack(g1))


def chefer_relevance(attns, grads):
    """The authors' loop (Transformer-MM-Explainability, generic self-attention rule) in float64 NumPy:
    R = I; for each layer: cam = mean_h (grad * attn).clamp(min=0); R += cam @ R."""
    n = attns.shape[-1]
    R = np.eye(n)
    for attn, grad in zip(attns, grads):  # attn, grad: (h, n, n), first layer first
        cam = np.maximum(grad * attn, 0.0).mean(axis=0)
        R = R + cam @ R
    return R


@pytest.mark.parametrize("seed", range(4))
def test_grad_rollout_follows_the_authors_loop_when_heads_disagree(seed):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, 3, 2, 5)
    g = rng.normal(size=(3, 2, 5, 5))
    g[:, 1] = -np.abs(g[:, 1]) * 2  # head 2's relevance is negative everywhere: clipped to 0 before the mean
    g[:, 0] = np.abs(g[:, 0]) * 3   # head 1's positive
    ref = chefer_relevance(w, g)
    np.testing.assert_allclose(grad_rollout(w, g), ref, rtol=1e-12, atol=1e-12)
    assert np.abs(ref.sum(-1) - 1).max() > 0.1  # unnormalised: rows do not sum to 1 here
    # torch tensors (e.g. attention maps and their .grad) give the same
    np.testing.assert_allclose(grad_rollout(torch.tensor(w), torch.tensor(g)), ref, rtol=1e-12, atol=1e-12)


def random_weights(rng, layers, heads, n):
    w = rng.random((layers, heads, n, n)) ** 3
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
def test_properties(seed):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, 3, 2, 4)
    for fusion in ("mean", "max", "min"):
        r = rollout(w, head_fusion=fusion)
        np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-12)
        assert (r >= 0).all()
    mats = layer_matrices(w)
    f = flow(w)
    # a cut just below the source ({(L, i)} alone) has capacity Σ_j Â_L[i, j] = 1; one just above the sink
    # ({(0, j)} cut off) has Σ_i Â_1[i, j]; and flow ≥ the best single path (the widest bottleneck path)
    assert (f <= 1 + 1e-9).all()
    assert (f <= mats[0].sum(0)[None, :] + 1e-9).all()
    # widest[i, j, k, m] = min(Â3[i, j], Â2[j, k], Â1[k, m]) → max over the middle nodes j, k
    widest = np.minimum(np.minimum(mats[2][:, :, None, None], mats[1][None, :, :, None]), mats[0][None, None, :, :])
    best_path = widest.max(axis=(1, 2))
    assert (f >= best_path - 1e-9).all()


def brute_force_min_cut(cap, s, t):
    n = len(cap)
    others = [v for v in range(n) if v not in (s, t)]
    best = np.inf
    for bits in itertools.product([0, 1], repeat=len(others)):
        side = {s} | {v for v, b in zip(others, bits) if b}
        best = min(best, sum(cap[u][v] for u in side for v in range(n) if v not in side))
    return best


@pytest.mark.parametrize("seed", range(8))
def test_max_flow_equals_brute_force_min_cut(seed):
    rng = np.random.default_rng(seed)
    cap = rng.random((7, 7)) * (rng.random((7, 7)) < 0.5)
    np.fill_diagonal(cap, 0)
    assert max_flow(cap, 0, 6) == pytest.approx(brute_force_min_cut(cap, 0, 6), abs=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match=r"\(layers, h, n, n\)"):
        rollout(np.ones((2, 3, 3)))
    with pytest.raises(ValueError, match="finite"):
        rollout(np.full((1, 1, 2, 2), np.nan))
    with pytest.raises(ValueError, match=">= 0"):
        max_flow(-np.ones((2, 2)), 0, 1)


def test_grad_rollout_names_the_bad_gradients():
    good = stack(A1)
    with pytest.raises(ValueError, match=r"^grads must be \(layers, h, n, n\); got shape \(3, 3\)$"):
        grad_rollout(good, np.ones((3, 3)))
    with pytest.raises(ValueError, match="^grads must be finite$"):
        grad_rollout(good, np.full((1, 1, 3, 3), np.inf))


def test_flow_fuses_heads_as_asked():
    heads = stack([[[1, 0, 0], [1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0], [0, 0, 1]]])  # 1 layer, 2 heads
    # one layer: flow = Â; max over heads = [[1,0,0],[1,1,0],[0,1,1]] → 0.5·max + 0.5·I, rows renormalised
    np.testing.assert_allclose(flow(heads, head_fusion="max"),
                               [[1, 0, 0], [1 / 3, 2 / 3, 0], [0, 1 / 3, 2 / 3]], atol=1e-12)
    np.testing.assert_allclose(flow(heads, head_fusion="min"), np.eye(3), atol=1e-12)
