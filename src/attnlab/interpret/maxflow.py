"""Maximum flow on a small dense graph: Edmonds–Karp (Edmonds & Karp 1972).

https://doi.org/10.1145/321694.321699 — repeatedly push flow along a shortest
(fewest-edges) augmenting path of the residual graph, found by breadth-first search,
until none is left; the flow then equals the capacity of a minimum cut.

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
    residual = cap.copy()
    neighbours = [np.flatnonzero((cap[u] > 0) | (cap[:, u] > 0)) for u in range(n)]
    total = 0.0
    while True:
        parent = np.full(n, -1)
        parent[source] = source
        queue = deque([source])
        while queue and parent[sink] < 0:
            u = queue.popleft()
            for v in neighbours[u]:
                if parent[v] < 0 and residual[u, v] > eps:
                    parent[v] = u
                    queue.append(v)
        if parent[sink] < 0:
            return total
        push, v = np.inf, sink
        while v != source:  # the bottleneck along the path
            push = min(push, residual[parent[v], v])
            v = parent[v]
        v = sink
        while v != source:
            u = parent[v]
            residual[u, v] -= push
            residual[v, u] += push
            v = u
        total += push


__all__ = ["max_flow"]
