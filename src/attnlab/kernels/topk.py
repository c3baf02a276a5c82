"""Top-k attention: each query keeps its k highest-scoring keys (the second tutorial's dynamic selection).

    S(i) = top-k_j (q_i·k_j · scale)      o_i = Σ_{j ∈ S(i)} softmax_j(q_i·k_j · scale) v_j

The scores are computed in chunks of query rows to choose the keys (O(n²)
time, like any content-based choice, but O(chunk·n) memory); the attention
itself runs on the gathered k keys with ordinary autograd, so memory is
O(n·k·d). The choice is not differentiated (it is a hard selection, as in
"Explicit Sparse Transformer", Zhao et al. 2019, https://arxiv.org/abs/1912.11637).
Equal to dense attention masked with ``TopK.mask``.

The core's non-finite rule (``attnlab.functional.attention.zero_nonfinite`` and
``finish_nonfinite``): NaN/±inf entries of the query, keys and values are zeroed before
anything is chosen or gathered, so a key or value outside a row's kept set (padding, or
beyond the k best) never reaches its output or any gradient, even when k exceeds the
number of real keys. A non-finite key or value that a row *may* attend (the pattern and
the padding allow it) is always kept first and makes that row NaN; a row with no key
gives zeros, with zero gradients.
"""

from __future__ import annotations

import math

import torch

from .. import _checks
from ..functional.attention import finish_nonfinite, zero_nonfinite
from ..functional.scores import default_scale
from ..functional.softmax import masked_softmax
from ..patterns import Pattern

_ROW_BUDGET = 1 << 22  # score elements per chunk while choosing


class TopK:
    """The second tutorial's dynamic selection: each query keeps its k highest-scoring allowed keys.

    The kept set depends on the scores qᵀk·scale, so this is not a static
    ``Pattern``: ``mask(query, key)`` gives the dense bool mask (…, q, k) for a
    given input, and ``attnlab.kernels.topk_attention`` computes the attention
    with O(n·k) memory. Ties are broken as ``torch.topk`` breaks them; a query
    with fewer than k allowed keys keeps all of them.
    """

    def __init__(self, k: int, base: Pattern | None = None):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1; got {k!r}")
        self.k = k
        self.base = base

    def mask(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        *,
        scale: float | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query (…, n, d), key (…, n, d) → (…, n, n) bool, True on each row's kept keys.

        ``mask``: a key mask, bool (b, n), (…, n) or (…, 1, n), True = may attend (a real key).
        """
        scale, mask = _validate(query, key, None, scale, mask)
        n = key.shape[-2]
        idx, ok = topk_indices(query, key, self, scale=scale, mask=mask)  # (…, n, k)
        out = torch.zeros(*idx.shape[:-1], n, dtype=torch.bool, device=key.device)
        return out.scatter(-1, idx, ok)

    def __repr__(self) -> str:
        return f"top_k({self.k})" + ("" if self.base is None else f" within {self.base!r}")


def top_k(k: int, within: Pattern | None = None) -> TopK:
    """Each query keeps its ``k`` highest-scoring keys (among those ``within`` allows)."""
    return TopK(k, within)


def _as_topk(topk: object) -> TopK:
    """A ``TopK``, or its k as an integer >= 1."""
    return topk if isinstance(topk, TopK) else TopK(topk)  # type: ignore[arg-type]  # TopK checks k


def _validate(
    query: object, key: object, value: object | None, scale: object, mask: object
) -> tuple[float | None, torch.Tensor | None]:
    """Entry checks of the top-k functions → (scale or None, key mask (…, n) or None)."""
    names = ("query", "key") if value is None else ("query", "key", "value")
    given = (query, key) if value is None else (query, key, value)
    tensors = tuple(_checks.tensor(n, t, 2) for n, t in zip(names, given))
    _checks.floating(names, tensors)
    q, k = tensors[0], tensors[1]
    _checks.features("query", q)
    _checks.features_match("top-k attention", q, k)
    if value is not None and tensors[2].shape[-2] != k.shape[-2]:
        raise ValueError(
            f"key and value must have the same length n: key {_checks.shape(k)}, value {_checks.shape(tensors[2])}"
        )
    lead = _checks.leading_broadcast(names, tensors)
    scale = None if scale is None else _checks.scale(scale)
    return scale, _key_mask(mask, tuple(lead), k.shape[-2])


def _key_mask(m: object, lead: tuple[int, ...], n: int) -> torch.Tensor | None:
    """A key mask (True = may attend) as (…, n), broadcastable to the leading dimensions ``lead`` + (n,).

    Accepted: (…, n) against the leading dimensions (e.g. (b, 1, n) or (b, h, n) for (b, h, n, d)
    inputs), the scores' form (…, 1, n) (e.g. (b, 1, 1, n)), and (b, n) for the first leading dimension.
    """
    if m is None:
        return None
    expected = (
        f"mask must be bool, True = may attend (a real key), shaped (b, n), (…, n) or (…, 1, n) to match the "
        f"inputs' leading dimensions ({', '.join(map(str, lead))}) and n={n} keys"
    )
    if not isinstance(m, torch.Tensor):
        raise ValueError(f"{expected}; got {type(m).__name__}")
    if m.dtype != torch.bool:
        raise _checks.DtypeError(f"{expected}; got dtype {m.dtype} (convert with mask.bool())")
    given = m
    if m.dim() == len(lead) + 2 and m.shape[-2] == 1:
        m = m.squeeze(-2)  # the scores' form (…, 1, n)
    elif m.dim() == 2 and len(lead) >= 2 and m.shape[0] in (1, lead[0]):
        m = m.view(m.shape[0], *([1] * (len(lead) - 1)), m.shape[-1])  # (b, n) → (b, 1, …, n)
    try:
        ok = m.dim() == len(lead) + 1 and tuple(_checks.broadcast_shapes(m.shape, (*lead, n))) == (*lead, n)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{expected}; got shape {_checks.shape(given)}")
    return m


@torch.no_grad()
def topk_indices(
    query: torch.Tensor,
    key: torch.Tensor,
    topk: TopK,
    *,
    scale: float | None = None,
    mask: torch.Tensor | None = None,
    first: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """query (…, n, d), key (…, n, d) → (indices (…, n, k'), kept (…, n, k') bool), k' = min(k, n).

    ``mask``: a key mask, bool (b, n), (…, n) or (…, 1, n) against the leading dimensions, True = may attend
    (a real key).
    ``first``: bool (…, n), keys chosen before any other wherever allowed (the non-finite ones, whose
    row is NaN whatever else it keeps).
    """
    topk = _as_topk(topk)
    scale, mask = _validate(query, key, None, scale, mask)
    n, d = key.shape[-2], query.shape[-1]
    scale = default_scale(d) if scale is None else float(scale)
    kk = min(topk.k, n)
    lead = _checks.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    rows = max(1, _ROW_BUDGET // max(1, n * math.prod(lead)))
    idx, ok = [], []
    cols = torch.arange(n, device=key.device)
    for s0 in range(0, query.shape[-2], rows):
        r = torch.arange(s0, min(query.shape[-2], s0 + rows), device=key.device)
        s = (query[..., r, :] * scale) @ key.transpose(-1, -2)  # (…, r, n)
        if first is not None:
            s = s.masked_fill(first[..., None, :], float("inf"))
        if topk.base is not None:
            s = s.masked_fill(~topk.base.allows(r[:, None], cols[None, :], n), float("-inf"))
        if mask is not None:
            s = s.masked_fill(~mask[..., None, :], float("-inf"))
        val, ix = s.topk(kk, dim=-1)
        idx.append(ix)
        ok.append(val > float("-inf"))
    return torch.cat(idx, -2), torch.cat(ok, -2)


def topk_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    topk: TopK | int,
    *,
    scale: float | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Self-attention where each query attends its k best keys: (b, h, n, d) → (b, h, n, d_v).

    ``mask``: a key mask, bool (b, n), (b, 1, n), (b, h, n) or (b, 1, 1, n), True = may attend (a real key);
    None: every key.
    """
    topk = _as_topk(topk)
    scale, mask = _validate(query, key, value, scale, mask)
    d = query.shape[-1]
    if query.shape[-2] == 0 or key.shape[-2] == 0:  # nothing to choose from: an empty (or all-zero) output
        lead = _checks.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
        # keeps the graph without reading a value (a NaN/inf or an overflowing sum must not reach a row
        # with no key): zero, zero gradients
        zero = query.flatten()[:0].sum() + key.flatten()[:0].sum() + value.flatten()[:0].sum()
        return value.new_zeros(*lead, query.shape[-2], value.shape[-1]) + zero
    scale = default_scale(d) if scale is None else float(scale)
    query, key, value, bad_q, bad = zero_nonfinite(query, key, value)  # bad_q (b, h, n), bad (b, h|1, n)
    idx, ok = topk_indices(query, key, topk, scale=scale, mask=mask, first=bad)  # (b, h, n, k)
    lead = idx.shape[:-2]
    n, kk = idx.shape[-2:]
    flat = idx.reshape(*lead, n * kk, 1)
    kg = key.expand(*lead, *key.shape[-2:]).gather(-2, flat.expand(*lead, n * kk, d)).reshape(*lead, n, kk, d)
    dv = value.shape[-1]
    vg = value.expand(*lead, *value.shape[-2:]).gather(-2, flat.expand(*lead, n * kk, dv)).reshape(*lead, n, kk, dv)
    s = (query.unsqueeze(-2) @ kg.transpose(-1, -2)).squeeze(-2) * scale  # (b, h, n, k)
    w = masked_softmax(s, ok)
    out = (w.unsqueeze(-2) @ vg).squeeze(-2)  # (b, h, n, d_v)
    kept_bad = bad.expand(*lead, bad.shape[-1]).gather(-1, idx.flatten(-2)).view_as(ok) & ok  # (b, h, n, k)
    dead = ~ok.any(-1, keepdim=True)  # (b, h, n, 1): rows with no key
    return finish_nonfinite(out, kept_bad.any(-1) | bad_q, dead)


__all__ = ["TopK", "top_k", "topk_attention", "topk_indices"]
