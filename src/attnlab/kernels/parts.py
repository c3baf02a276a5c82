"""A pattern as disjoint parts: its sliding window, its global tokens, and the rest of it.

    S(i) = W(i) ∪ G(i) ∪ R(i)        W: sliding_window(before, after),  G: global_tokens(g),
                                     R: the other ``|`` terms without the pairs of W and G

Each part has its own kernel in ``block_sparse_attention``: the window as contiguous key
spans (``band``), the global tokens as two dense blocks (``global_part``), the rest as gathered
tiles (``tiles``); ``reach`` follows the same parts to find the queries that may attend a
non-finite key. The split is computed once per plan and held there (``attnlab.kernels.Plan.parts``).

Symbols → names: W ``window``, G ``glob`` (a ``GlobalTokens``), R ``rest`` (a ``Pattern`` or None).
"""

from __future__ import annotations

import torch

from ..patterns import Combined, GlobalTokens, Pattern, Window


class _Without(Pattern):
    """The pairs of ``a`` that ``b`` does not allow (the rest of a pattern beside its window)."""

    def __init__(self, a: Pattern, b: Pattern):
        self.a, self.b = a, b

    def allows(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
        return self.a.allows(q_idx, kv_idx, n) & ~self.b.allows(q_idx, kv_idx, n)

    def block_layout(self, n: int, block: int) -> torch.Tensor:
        return self.a.block_layout(n, block)  # a superset; plan() drops the empty tiles

    def __repr__(self) -> str:
        return f"({self.a!r} without {self.b!r})"


def split(pattern: Pattern) -> tuple[Window | None, GlobalTokens | None, Pattern | None]:
    """pattern = window | global tokens | rest → (window, global tokens, rest without either),
    from its top-level ``|`` terms; (None, None, pattern) when it has neither. Nothing is kept here
    (a ``Plan`` holds its split)."""
    terms, todo = [], [pattern]
    while todo:
        p = todo.pop()
        if isinstance(p, Combined) and p.op == "or":
            todo += [p.b, p.a]
        else:
            terms.append(p)
    win = next((t for t in terms if type(t) is Window), None)
    globs = [t for t in terms if type(t) is GlobalTokens]
    glob = None if not globs else GlobalTokens(torch.cat([g.indices for g in globs]))
    others = [t for t in terms if t is not win and type(t) is not GlobalTokens]
    rest = None
    if others:
        rest = others[0]
        for t in others[1:]:
            rest = rest | t
        covered = win if glob is None else (glob if win is None else win | glob)
        if covered is not None:
            rest = _Without(rest, covered)
    return win, glob, rest


__all__: list[str] = []
