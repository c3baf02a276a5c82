"""Maximum flow on a small dense graph: Dinic's algorithm (Dinitz 1970).

https://en.wikipedia.org/wiki/Dinic%27s_algorithm — in phases: label the nodes of the
residual graph by breadth-first distance from the source, then push a blocking flow along
paths whose levels rise by one (a depth-first search with current-arc pointers); stop when
the sink is unreachable. The flow then equals the capacity of a minimum cut.

    residual r(u, v) = c(u, v) - f(u, v) + f(v, u)        augment by min r along the path

| symbol | argument |
|---|---|
| c(u, v) | ``capacity[u, v]`` (float64 NumPy, (N, N), ≥ 0) |
| s, t | ``source``, ``sink`` |

Used by ``attnlab.interpret.flow`` (attention flow). Pure NumPy; no networkx.
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
    residual = cap.tolist()  # Python lists: element access is much faster than NumPy's here
    linked = (cap > eps) | (cap.T > eps)
    neighbours = [np.flatnonzero(row).tolist() for row in linked]
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


__all__ = ["max_flow"]
