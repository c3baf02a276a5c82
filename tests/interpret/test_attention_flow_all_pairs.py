"""Attention flow's all-pairs max-flow (``layered_max_flows``) against independent answers.

* brute-force minimum cuts (every subset of the nodes) on tiny layered graphs, capacities near 1 and near 1000;
* Dinic's algorithm (``max_flow``) run on the dense matrix of the whole graph, one pair at a time
  (how ``flow`` computed every value before), on dense, causal and sparse weights, with and
  without the residual term;
* hand-worked graphs where the maximum needs flow sent back along an edge (a path through a back
  arc of the residual graph), for one sink and when the sinks follow one another, and where the flow
  to one sink ran through a node that cannot reach the next;
* the flow settled at the simple cut without search (a bridge flow): a lower bound that never claims
  more than the maximum, and the search alone (bridge off) gives the same values;
* a timing guard: 12 layers × 64 tokens, dense and causal, well inside what the search alone took.
"""

from __future__ import annotations

import itertools
import time
import warnings

import numpy as np
import pytest

import attnlab.interpret.maxflow as maxflow_module
from attnlab.interpret import flow, layer_matrices, max_flow
from attnlab.interpret.maxflow import layered_max_flows


def whole_graph(mats):
    """The dense capacity matrix of nodes (l, i), index l·n + i, edges (l, i) → (l-1, j) of mats[l-1][i, j]."""
    layers, n, _ = mats.shape
    cap = np.zeros(((layers + 1) * n,) * 2)
    for layer, m in enumerate(mats, start=1):
        cap[layer * n:(layer + 1) * n, (layer - 1) * n:layer * n] = m
    return cap


def pairwise_dinic(mats):
    layers, n, _ = mats.shape
    cap = whole_graph(mats)
    return np.array([[max_flow(cap, layers * n + i, j) for j in range(n)] for i in range(n)])


def brute_force_min_cut(cap, s, t):
    n = len(cap)
    others = [v for v in range(n) if v not in (s, t)]
    best = np.inf
    for bits in itertools.product([0, 1], repeat=len(others)):
        side = np.zeros(n, bool)
        side[s] = True
        side[[v for v, b in zip(others, bits) if b]] = True
        best = min(best, cap[side][:, ~side].sum())
    return best


def weights(rng, layers, heads, n, kind):
    w = rng.random((layers, heads, n, n)) ** 3
    if kind == "causal":
        w = w * np.tril(np.ones((n, n)))
    elif kind == "sparse":
        w = w * (rng.random(w.shape) < 0.4)
        w[..., 0] += 1e-3  # every row keeps a positive entry
    return w / w.sum(-1, keepdims=True)


@pytest.mark.parametrize("scale", [1.0, 1e3])  # capacities of any size: 1e3 leaves rounding above the excess threshold
@pytest.mark.parametrize("bridge", [True, False])
@pytest.mark.parametrize("seed", range(8))
def test_equals_brute_force_min_cuts_on_tiny_graphs(seed, bridge, scale, monkeypatch):
    rng = np.random.default_rng(seed)
    mats = rng.random((3, 3, 3)) * (rng.random((3, 3, 3)) < 0.6) * scale  # 12 nodes, some edges missing
    cap = whole_graph(mats)
    expected = [[brute_force_min_cut(cap, 9 + i, j) for j in range(3)] for i in range(3)]
    if not bridge:
        search_only(monkeypatch)
    np.testing.assert_allclose(layered_max_flows(mats), expected, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("kind", ["dense", "causal", "sparse"])
@pytest.mark.parametrize("residual", [True, False])
def test_equals_dinic_pair_by_pair(kind, residual):
    rng = np.random.default_rng(len(kind) + residual)
    for layers, n in ((2, 5), (5, 6), (8, 7)):
        mats = layer_matrices(weights(rng, layers, 2, n, kind), residual=residual)
        np.testing.assert_allclose(layered_max_flows(mats), pairwise_dinic(mats), atol=1e-10)


def test_the_residual_phase_runs_and_agrees(monkeypatch):
    """Causal weights leave some pairs short of the maximum after the blocking flow: the later phases
    (Dinic on the residual graph) must run, and the sums still agree with Dinic on the whole graph."""
    calls = []
    original = maxflow_module.max_flow

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    mats = layer_matrices(weights(np.random.default_rng(7), 12, 2, 12, "causal"))
    expected = pairwise_dinic(mats)
    monkeypatch.setattr(maxflow_module, "max_flow", counting)
    np.testing.assert_allclose(layered_max_flows(mats), expected, atol=1e-10)
    assert len(calls) > 0


def test_flow_that_must_be_sent_back_along_an_edge(monkeypatch):
    # source (3, 0) → a = (2, 0), b = (2, 1), capacity 1 each; a → c = (1, 0) and a → d = (1, 1), b → c only;
    # c and d → the sink (0, 0), capacity 1 each. Sending a's unit through c (as a greedy path or an
    # even split does) leaves b stuck: the maximum, 2, routes a → d and b → c, i.e. sends a → c back.
    mats = np.zeros((3, 2, 2))
    mats[2] = [[1, 1], [0, 0]]  # layer 3 → 2: only the source row matters
    mats[1] = [[1, 1], [1, 0]]  # a → c, a → d, b → c
    mats[0] = [[1, 0], [1, 0]]  # c → sink 0, d → sink 0 (sink 1 gets nothing)
    np.testing.assert_allclose(layered_max_flows(mats), [[2, 0], [0, 0]], atol=1e-12)
    # the same with a second sink that takes c's flow first: the flow to sink 0 must move off c
    mats[0] = [[1, 1], [1, 0]]
    np.testing.assert_allclose(layered_max_flows(mats), [[2, 1], [0, 0]], atol=1e-12)
    np.testing.assert_allclose(layered_max_flows(mats), pairwise_dinic(mats), atol=1e-12)
    search_only(monkeypatch)
    np.testing.assert_allclose(layered_max_flows(mats), [[2, 1], [0, 0]], atol=1e-12)
    mats[0] = [[1, 0], [1, 0]]
    np.testing.assert_allclose(layered_max_flows(mats), [[2, 0], [0, 0]], atol=1e-12)


def test_one_layer_and_bad_input():
    m = np.array([[[0.25, 0.75], [1.0, 0.0]]])
    np.testing.assert_array_equal(layered_max_flows(m), m[0])
    with pytest.raises(ValueError, match=r"\(layers, n, n\)"):
        layered_max_flows(np.ones((2, 3)))
    with pytest.raises(ValueError, match=">= 0"):
        layered_max_flows(-np.ones((2, 3, 3)))


def search_only(monkeypatch):
    """Switch the bridge flow off: every problem goes through the search."""
    monkeypatch.setattr(maxflow_module, "_bridge_flows", lambda mats, eps: (np.zeros(mats.shape[1:]), np.full(mats.shape[1:], -1.0)))


def test_flow_into_a_dead_end_is_rerouted(monkeypatch):
    # source (3, 0) → a = (2, 0); a → c = (1, 0) and a → d = (1, 1); c → sink 1 only, d → sink 0 only.
    # Whichever sink comes first takes a's unit through its node; for the other sink that node is a dead
    # end, and the unit must come back to a and go through the other node.
    mats = np.zeros((3, 2, 2))
    mats[2] = [[1, 0], [0, 0]]
    mats[1] = [[1, 1], [0, 0]]
    mats[0] = [[0, 1], [1, 0]]
    np.testing.assert_allclose(layered_max_flows(mats), [[1, 1], [0, 0]], atol=1e-12)
    search_only(monkeypatch)
    np.testing.assert_allclose(layered_max_flows(mats), [[1, 1], [0, 0]], atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_the_bridge_flow_is_a_lower_bound_and_the_cut_an_upper_one(seed):
    rng = np.random.default_rng(seed)
    mats = rng.random((3, 3, 3)) * (rng.random((3, 3, 3)) < 0.8)
    mats[1] *= rng.random() * 0.5  # a middle layer that is often the bottleneck
    cap = whole_graph(mats)
    exact = np.array([[brute_force_min_cut(cap, 9 + i, j) for j in range(3)] for i in range(3)])
    cut, value = maxflow_module._bridge_flows(mats, 1e-12)
    assert (value <= exact + 1e-12).all() and (cut >= exact - 1e-12).all()
    np.testing.assert_allclose(cut, np.minimum(mats[2].sum(1)[:, None], mats[0].sum(0)[None, :]))


def test_a_middle_bottleneck_is_not_settled_by_the_bridge():
    mats = np.zeros((3, 2, 2))
    mats[2] = [[0.5, 0.5], [1.0, 0.0]]
    mats[1] = [[0.1, 0.0], [0.0, 0.1]]  # 0.2 through the middle, where the simple cuts allow 1
    mats[0] = [[1.0, 1.0], [1.0, 1.0]]
    np.testing.assert_allclose(layered_max_flows(mats), [[0.2, 0.2], [0.1, 0.1]], atol=1e-12)


def test_dense_weights_are_settled_without_search(monkeypatch):
    calls = []
    original = maxflow_module._solve_sink

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    mats = layer_matrices(weights(np.random.default_rng(3), 8, 2, 7, "dense"))
    expected = pairwise_dinic(mats)
    monkeypatch.setattr(maxflow_module, "_solve_sink", counting)
    np.testing.assert_allclose(layered_max_flows(mats), expected, atol=1e-10)
    assert not calls


@pytest.mark.parametrize("group", [16, 3])  # sources solved together for a sink: all of them, or in groups
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["dense", "causal", "sparse"])
def test_the_search_alone_equals_dinic_pair_by_pair(kind, seed, group, monkeypatch):
    rng = np.random.default_rng([len(kind), seed])
    cases = [layer_matrices(weights(rng, layers, 2, n, kind), residual=residual)
             for layers, n, residual in ((3, 5, True), (6, 6, False), (8, 7, True), (5, 8, False))]
    expected = [pairwise_dinic(mats) for mats in cases]
    search_only(monkeypatch)
    monkeypatch.setattr(maxflow_module, "_GROUP", group)
    for mats, want in zip(cases, expected):
        np.testing.assert_allclose(layered_max_flows(mats), want, atol=1e-10)


@pytest.mark.parametrize("kind, limit", [("dense", 5.0), ("causal", 15.0)])
def test_flow_at_12_layers_by_64_tokens_is_fast(kind, limit):
    # here (2 shared cores): dense about 0.4 s, causal about 4 s; before the bridge flow and the sinks
    # taken last to first on the nodes that reach them, 19 s and 36 s
    w = weights(np.random.default_rng(0), 12, 4, 64, kind)
    start = time.perf_counter()
    f = flow(w)
    assert time.perf_counter() - start < limit
    assert f.shape == (64, 64) and (f <= 1 + 1e-9).all()


@pytest.mark.parametrize("narrow", [1, 2, 3])  # which middle layer is the bottleneck
@pytest.mark.parametrize("seed", range(8))
def test_a_bottleneck_deep_in_the_middle_is_not_settled_by_the_bridge(narrow, seed):
    # 5 layers: the bridge flow's check that it fits every middle edge must cover each middle layer,
    # in the right order; a narrow one anywhere caps the flow below both simple cuts.
    rng = np.random.default_rng([narrow, seed, 5])
    mats = rng.random((5, 3, 3)) * (rng.random((5, 3, 3)) < 0.8) + 0.05
    mats[narrow] *= 0.05 + 0.2 * rng.random((3, 3))
    _, value = maxflow_module._bridge_flows(mats, 1e-12)
    exact = pairwise_dinic(mats)
    assert (value <= exact + 1e-12).all()
    np.testing.assert_allclose(layered_max_flows(mats), exact, atol=1e-12)


@pytest.mark.parametrize("kind", ["causal", "sparse"])
def test_flow_prints_no_numpy_warnings(kind):
    # zero rows and columns of the bridge flow's measure are expected, not a user's problem to be warned of
    w = weights(np.random.default_rng(1), 6, 2, 8, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flow(w, residual=False)
