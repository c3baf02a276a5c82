"""Maximum flow: Dinic's algorithm on a small dense graph, and every pair of a layered graph at once.

``max_flow`` is Dinic's algorithm (Dinitz 1970) on any graph given as a dense capacity matrix.

https://en.wikipedia.org/wiki/Dinic%27s_algorithm — in phases: label the nodes of the
residual graph by breadth-first distance from the source, then push a blocking flow along
paths whose levels rise by one (a depth-first search with current-arc pointers); stop when
the sink is unreachable. The flow then equals the capacity of a minimum cut.

    residual r(u, v) = c(u, v) - f(u, v) + f(v, u)        augment by min r along the path

| symbol | argument |
|---|---|
| c(u, v) | ``capacity[u, v]`` (float64 NumPy, (N, N), ≥ 0) |
| s, t | ``source``, ``sink`` |

``layered_max_flows`` solves the n² problems of attention flow (top node i → bottom node j of a
graph whose edges go from one layer to the next) in NumPy:

0. Settled without search: the simple cut min(A_i, B_j) (all of the source's edges, or all of the
   sink's) bounds the flow above; a bridge flow bounds it below: the path measure through the middle
   layers whose end marginals are the source's and the sink's edges (Sinkhorn on the product of the
   middle layers), scaled down until every edge holds it. Where the bounds meet (to 1e-12 relative),
   the value is the cut. Dense weights are all settled here.
The rest, one sink after another (last to first), its sources in batches of 16, each batch on the
nodes that its sources reach and that reach the sink:

1. Blocking flow, Karzanov's wave method (Dinic's first phase, whose level graph is the layers):
   the source fills its edges; each wave pushes every excess forward a layer at a time (in
   proportion to the room on a node's edges); a node that cannot pass its excess on is blocked
   and, in the backward half of the wave, returns it along the edges that brought it.
2. Finished: a problem whose flow equals a cut it cannot exceed (all of the source's edges, or all
   of the sink's), or whose residual graph has no path left from source to sink (a breadth-first
   sweep of the batch).
3. The rest: Dinic's later phases, ``max_flow`` on the residual graph (cut down to the nodes on
   some path from source to sink), and the values add.
4. Next sink: the flow delivered to the last sink goes back as excess to the nodes that sent it,
   and flow into nodes that cannot reach the new sink goes back to the nodes that sent it there;
   step 1 starts again from that preflow. The other bottom nodes have no outgoing edges, so they
   change no cut between a source and the current sink.

On two shared cores, 12 layers × 64 tokens: 0.3–0.4 s with dense weights (all settled in step 0),
about 4 s with causal ones (most pairs need steps 1–3); all sources in one batch on every node,
first sink to last, without step 0, took 19 s and 36 s, and ``max_flow`` pair by pair over 150 s.
Pure NumPy; no networkx or scipy.
"""

from __future__ import annotations

from collections import deque

import numpy as np


def max_flow(capacity: np.ndarray, source: int, sink: int, *, eps: float = 1e-12) -> float:
    """The value of a maximum ``source`` → ``sink`` flow; capacity (N, N), non-negative."""
    cap = np.asarray(capacity, dtype=np.float64)
    if cap.ndim != 2 or cap.shape[0] != cap.shape[1]:
        raise ValueError(f"capacity must be a square (N, N) matrix; got shape {cap.shape}")
    if (cap < 0).any() or not np.isfinite(cap).all():
        raise ValueError("capacities must be finite and >= 0")
    n = cap.shape[0]
    if not (0 <= source < n and 0 <= sink < n):
        raise ValueError(f"source and sink must be node indices in [0, {n}); got {source}, {sink}")
    if source == sink:
        return float("inf")
    linked = (cap > eps) | (cap.T > eps)
    rows, cols = np.nonzero(linked)
    flat, ends = cols.tolist(), np.cumsum(linked.sum(1)).tolist()
    neighbours = [flat[a:b] for a, b in zip([0, *ends[:-1]], ends)]  # row by row, in order
    values = cap[rows, cols].tolist()  # Python dicts of the arcs only: fast element access, no n² lists
    residual = [dict(zip(nb, values[a:b])) for nb, a, b in zip(neighbours, [0, *ends[:-1]], ends)]
    total = 0.0
    while True:
        level = [-1] * n  # breadth-first levels of the residual graph (Dinic's phase)
        level[source] = 0
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in neighbours[u]:
                if level[v] < 0 and residual[u][v] > eps:
                    level[v] = level[u] + 1
                    queue.append(v)
        if level[sink] < 0:
            return total
        arc = [0] * n  # current-arc pointers: each edge is tried once per phase
        while True:  # blocking flow: augment along level-increasing paths until none is left
            path, u = [source], source
            while u != sink:
                nbrs = neighbours[u]
                while arc[u] < len(nbrs):
                    v = nbrs[arc[u]]
                    if level[v] == level[u] + 1 and residual[u][v] > eps:
                        break
                    arc[u] += 1
                if arc[u] == len(nbrs):  # dead end: retreat
                    if u == source:
                        break
                    level[u] = -1
                    path.pop()
                    u = path[-1]
                    arc[u] += 1
                    continue
                u = nbrs[arc[u]]
                path.append(u)
            if u != sink:
                break
            push = min(residual[a][b] for a, b in zip(path, path[1:]))
            for a, b in zip(path, path[1:]):
                residual[a][b] -= push
                residual[b][a] += push
            total += push


#: Excess below this is rounding, not flow.
_TINY = 1e-14


def _rows(mask: np.ndarray):
    """The problems (rows of a batch) where ``mask`` (b, ...) holds anywhere: a slice if all do."""
    rows = np.flatnonzero(mask.reshape(len(mask), -1).any(1))
    return slice(None) if len(rows) == len(mask) else rows


def _forward_wave(caps, flows, excess, blocked, eps):
    """Every unblocked node, level by level, pushes its excess on along its free edges (in proportion
    to their room); a node left with excess is blocked (Karzanov). Only problems with excess at a level
    are computed there."""
    for k in range(1, len(caps)):
        rows = _rows((excess[k] > _TINY) & ~blocked[k])
        if isinstance(rows, np.ndarray) and not rows.size:
            continue
        c = caps[k] if caps[k].shape[0] == 1 else caps[k][rows]
        f = flows[k][rows]
        r = c - f  # (b, a_k, a_k+1)
        r = np.where((r > eps) & ~blocked[k + 1][rows][:, None, :], r, 0.0)
        e = np.where(blocked[k][rows], 0.0, np.maximum(excess[k][rows], 0.0))[:, :, None]
        room = r.sum(2, keepdims=True)
        push = r * np.minimum(1.0, np.divide(e, room, out=np.zeros_like(e), where=room > 0))
        flows[k][rows] = f + push
        excess[k][rows] -= push.sum(2)
        excess[k + 1][rows] += push.sum(1)
        blocked[k][rows] |= excess[k][rows] > _TINY


def _backward_wave(flows, excess, blocked):
    """Every blocked node with excess, from the last level up, returns it along the edges that brought it."""
    for k in range(len(flows) - 1, 0, -1):
        held = blocked[k] & (excess[k] > _TINY)
        rows = _rows(held)
        if isinstance(rows, np.ndarray) and not rows.size:
            continue
        e = np.where(held[rows], excess[k][rows], 0.0)[:, None, :]
        f = flows[k - 1][rows]  # (b, a_k-1, a_k)
        back = np.clip(e - (np.cumsum(f, axis=1) - f), 0.0, f)
        flows[k - 1][rows] = f - back
        excess[k][rows] = np.where(held[rows], 0.0, excess[k][rows])
        if k > 1:
            excess[k - 1][rows] += back.sum(2)


def _blocking_flow(caps, flows, excess, eps) -> None:
    """From a preflow, fill the source's edges, then wave until no node but the sink holds excess:
    the flow is then blocking (every path forward has a full edge or a blocked node)."""
    add = np.where(caps[0] > eps, caps[0], 0.0) - flows[0]
    flows[0] += add
    excess[1] += add[:, 0, :]
    blocked = [np.zeros(e.shape, bool) for e in excess]
    for _ in range(sum(e.shape[1] for e in excess) + 1):  # each wave but the last blocks a node
        _forward_wave(caps, flows, excess, blocked, eps)
        if not any((e > _TINY).any() for e in excess[1:-1]):
            return
        _backward_wave(flows, excess, blocked)


def _reach(arcs_down, arcs_up, start: int) -> list[np.ndarray]:
    """Per level, (b, a_k) bool: the nodes reachable from level ``start`` (all of it) along the arcs
    arcs_down[k] (b, a_k, a_k+1) from level k to k+1 and arcs_up[k] from level k+1 to k, sweeping down and
    up until nothing new is reached."""
    b = len(arcs_down[0])
    reach = [np.zeros((b, a.shape[1]), bool) for a in arcs_down] + [np.zeros((b, arcs_down[-1].shape[2]), bool)]
    reach[start][...] = True
    total = -1
    while total != (total := sum(int(r.sum()) for r in reach)):
        for k in range(len(arcs_down)):
            reach[k + 1] |= (reach[k][:, :, None] & arcs_down[k]).any(1)
        for k in range(len(arcs_down) - 1, -1, -1):
            reach[k] |= (reach[k + 1][:, None, :] & arcs_up[k]).any(2)
    return reach


def _residual_arcs(caps, flows, eps):
    """The residual graphs' arcs: down along edges with room, up (against an edge) where it carries flow."""
    return [(c - f) > eps for c, f in zip(caps, flows)], [f > eps for f in flows]


def _residual_matrix(caps, flows, b: int, eps) -> np.ndarray:
    """Problem b's residual graph as a dense capacity matrix (node 0 the source, the last the sink), cut
    down to the nodes on some path from the source to the sink."""
    down, up = _residual_arcs([c if c.shape[0] == 1 else c[b:b + 1] for c in caps], [f[b:b + 1] for f in flows], eps)
    from_source = _reach(down, up, 0)
    to_sink = _reach([a.transpose(0, 2, 1) for a in reversed(up)], [a.transpose(0, 2, 1) for a in reversed(down)], 0)
    keep = [np.flatnonzero(s[0] & t[0]) for s, t in zip(from_source, reversed(to_sink))]
    start = np.cumsum([0] + [len(k) for k in keep])
    out = np.zeros((start[-1], start[-1]))
    for k, (c, f) in enumerate(zip(caps, flows)):
        rows, cols = slice(start[k], start[k + 1]), slice(start[k + 1], start[k + 2])
        fb = f[b][np.ix_(keep[k], keep[k + 1])]
        out[rows, cols] = np.clip(np.broadcast_to(c, f.shape)[b][np.ix_(keep[k], keep[k + 1])] - fb, 0.0, None)
        out[cols, rows] = np.clip(fb.T, 0.0, None)
    return out


def _finish(caps, flows, value, eps) -> None:
    """Complete ``value`` (b,) where a blocking flow may fall short of the maximum: below both simple cuts
    (all of the source's edges, all of the sink's) and with an augmenting path left in the residual graph."""
    bound = np.minimum(np.where(caps[0] > eps, caps[0], 0.0).sum(axis=(1, 2)),
                       np.where(caps[-1] > eps, caps[-1], 0.0).sum(axis=(1, 2)))
    open_ = np.flatnonzero(value < np.broadcast_to(bound, value.shape) - eps)
    if not open_.size:
        return
    sub = [c if c.shape[0] == 1 else c[open_] for c in caps]
    reach = _reach(*_residual_arcs(sub, [f[open_] for f in flows], eps), 0)
    for b in open_[reach[-1][:, 0]]:  # an augmenting path is left: Dinic's later phases
        res = _residual_matrix(caps, flows, b, eps)
        value[b] += max_flow(res, 0, len(res) - 1, eps=eps)


#: A certified lower bound this close to the cut above it (relative to max(1, cut)) settles a problem.
_CERTAIN = 1e-12


def _bridge_flows(mats: np.ndarray, eps: float, rounds: int = 40):
    """Per problem (i, j): the simple cut min(A_i, B_j) (all of the source's edges, or all of the sink's)
    and the value of a feasible flow found without search: a path measure through the middle layers with
    the source's and the sink's edges as its end marginals (Sinkhorn), scaled down until it fits every
    capacity. Where the two meet, the flow is maximal."""
    c = np.where(mats > eps, mats, 0.0)
    top, bottom, middle = c[-1], c[0], c[-2:0:-1]  # sources' edges (i, u), sinks' edges (w, j), the rest
    a, b = top.sum(1), bottom.sum(0)
    cut = np.minimum(a[:, None], b[None, :])
    p = np.divide(top, a[:, None], out=np.zeros_like(top), where=a[:, None] > 0)[:, None, :]  # (i, 1, u)
    q = np.divide(bottom, b, out=np.zeros_like(bottom), where=b > 0).T[None]  # (1, j, w)
    through = np.linalg.multi_dot([np.eye(len(a)), *middle, np.eye(len(a))])  # paths from layer L-1 to layer 1
    phi = np.ones(cut.shape + (len(a),))
    for _ in range(rounds):  # phi_u · through[u, w] · psi_w has row sums p, column sums q (at the limit)
        col = phi @ through
        psi = np.divide(q, col, out=np.zeros_like(col), where=col > 0)
        row = psi @ through.T
        phi = np.divide(p, row, out=np.zeros_like(row), where=row > 0)
    row, col = phi * (psi @ through.T), psi * (phi @ through)  # what the measure puts on each end edge
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = cut * np.minimum(np.where(row > 0, p / row, np.inf).min(-1), np.where(col > 0, q / col, np.inf).min(-1))
        down, up = [phi], [psi]  # the measure of the paths from the top to a node, from a node to the bottom
        for m in middle:
            down.append(down[-1] @ m)
        for m in middle[::-1]:
            up.append(up[-1] @ m.T)
        for d, u in zip(down[:-1], up[-2::-1]):  # edge (x, y) carries scale·d_x·cap·u_y: d_x·u_y ≤ 1/scale
            scale = np.minimum(scale, 1.0 / (d.max(-1) * u.max(-1)))
        value = np.where(np.isfinite(scale), scale * row.sum(-1), 0.0)
    return cut, value


def _alive(mats: np.ndarray, j: int, eps: float) -> list[np.ndarray]:
    """Per middle level (layer L-1 down to layer 1): the nodes with a path of edges > eps to the sink (0, j)."""
    alive = [mats[0][:, j] > eps]
    for m in mats[1:-1]:
        alive.append((m[:, alive[-1]] > eps).any(1))
    return [np.flatnonzero(x) for x in alive[::-1]]


def _drop_dead_ends(flows, excess, keep, kept) -> None:
    """Flow into nodes that cannot reach the sink goes back to the nodes that sent it (as excess), and
    those nodes' flow and excess are cleared: a preflow of the graph that is left. Only nodes ``kept``
    for the last sink (per level) can hold flow."""
    for k in range(len(flows) - 2, -1, -1):  # bottom up: what a dead node gets back is cleared with it
        f, dead = flows[k], np.setdiff1d(kept[k], keep[k])
        if not dead.size:
            continue
        if k > 0:
            excess[k] += f[:, :, dead].sum(2)
        f[:, :, dead] = 0.0
        excess[k + 1][:, dead] = 0.0


def layered_max_flows(mats: np.ndarray, *, eps: float = 1e-12) -> np.ndarray:
    """Max-flow from every top node to every bottom node of a layered graph: (L, n, n) → (n, n).

    The graph has nodes (l, i) for l = 0..L, i < n, and edges (l, i) → (l-1, j) of capacity
    ``mats[l-1][i, j]`` (≥ 0); ``out[i, j]`` is the max-flow from (L, i) to (0, j), as ``max_flow``
    finds it on the dense matrix of the whole graph. Problems a feasible flow settles at the simple cut
    are done first (``_bridge_flows``); the rest are solved together, one sink after another, on the
    nodes that can reach the sink: each sink starts from the flow to the one before, whose delivery is
    handed back as excess to the nodes that sent it (the other bottom nodes have no outgoing edges, so
    they never change a cut between a source and this sink)."""
    mats = np.asarray(mats, dtype=np.float64)
    if mats.ndim != 3 or mats.shape[1] != mats.shape[2]:
        raise ValueError(f"mats must be (layers, n, n); got shape {mats.shape}")
    if (mats < 0).any() or not np.isfinite(mats).all():
        raise ValueError("capacities must be finite and >= 0")
    layers, n, _ = mats.shape
    if layers == 1:
        return np.where(mats[0] > eps, mats[0], 0.0)
    cut, value = _bridge_flows(mats, eps)
    settled = value >= cut - _CERTAIN * np.maximum(cut, 1.0)
    out = np.where(settled, cut, 0.0)
    flows = [np.zeros((n, 1, n))] + [np.zeros((n, n, n)) for _ in range(layers - 2)] + [np.zeros((n, n, 1))]
    excess = [np.zeros((n, 1))] + [np.zeros((n, n)) for _ in range(layers - 1)] + [np.zeros((n, 1))]
    linked = np.eye(n, dtype=bool)
    for m in mats[::-1]:  # linked[i, j]: some path of edges > eps from (L, i) down to (0, j)
        linked = (linked.astype(np.float64) @ (m > eps)) > 0
    kept = [np.arange(n)] * (layers - 1)
    for j in range(n - 1, -1, -1):  # causal weights: the sources that reach the sink, and its nodes, grow
        excess[-2] += flows[-1][:, :, 0]  # the last sink's delivery, back to the nodes that sent it
        flows[-1][...] = 0.0
        excess[-1][...] = 0.0
        rows = np.flatnonzero(linked[:, j] & ~settled[:, j])  # the other sources wait
        if not rows.size:
            continue
        keep = _alive(mats, j, eps)
        _drop_dead_ends(flows, excess, keep, kept)
        kept = keep
        for group in np.array_split(rows, -(-len(rows) // _GROUP)):  # each on the nodes its sources reach
            out[group, j] = _solve_sink(mats, j, group, _reached(mats, group, keep, eps), flows, excess, eps)
    return out


#: Sources solved together for one sink: fewer share the nodes their sources reach (causal weights).
_GROUP = 16


def _reached(mats: np.ndarray, rows: np.ndarray, keep: list[np.ndarray], eps: float) -> list[np.ndarray]:
    """The nodes of ``keep`` (per middle level) that some source in ``rows`` reaches through them;
    a source's flow never leaves the nodes it reaches, so the others can be left out."""
    reach = (mats[-1][rows] > eps).any(0)
    out = []
    for k, m in zip(keep, [*mats[-2:0:-1], None]):
        mask = np.zeros(len(reach), bool)
        mask[k] = reach[k]
        out.append(np.flatnonzero(mask))
        if m is not None:
            reach = (m[mask] > eps).any(0)
    return out


def _solve_sink(mats, j, rows, keep, flows, excess, eps) -> np.ndarray:
    """Sink (0, j) for the sources ``rows``, on the nodes ``keep`` that reach it: a blocking flow from
    the stored preflow, then Dinic's later phases where needed; the flows are stored back."""
    top, sink = np.zeros(1, int), np.zeros(1, int)
    levels = [top, *keep, sink]
    sub_caps = [mats[-1][np.ix_(rows, keep[0])][:, None, :],
                *[m[np.ix_(u, v)][None] for m, u, v in zip(mats[-2:0:-1], keep, keep[1:])],
                mats[0][keep[-1], j][None, :, None]]
    index = [np.ix_(rows, u, v) for u, v in zip(levels, levels[1:])]
    sub_flows = [f[ix] for f, ix in zip(flows, index)]
    sub_excess = [e[np.ix_(rows, u)] for e, u in zip(excess, levels)]
    _blocking_flow(sub_caps, sub_flows, sub_excess, eps)
    value = sub_flows[-1].sum(axis=(1, 2))
    _finish(sub_caps, sub_flows, value, eps)
    for f, ix, part in zip(flows, index, sub_flows):
        f[ix] = part
    for e, u, part in zip(excess, levels, sub_excess):
        e[np.ix_(rows, u)] = part
    return value


__all__ = ["max_flow", "layered_max_flows"]
