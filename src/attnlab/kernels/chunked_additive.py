"""Memory-bounded additive (Bahdanau) scores: a custom autograd function that works in chunks.

    e_ij = vᵀ tanh(a_i + b_j),   a_i = W_q q_i  (b, q, d_a),   b_j = W_k k_j  (b, k, d_a)

Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning to
Align and Translate", https://arxiv.org/abs/1409.0473 (eq. 6 of appendix A).

The readable reference (``attnlab.scores.additive``) broadcasts ``a_i + b_j`` to
a ``(b, q, k, d_a)`` tensor, and autograd keeps it (and its tanh) for the
backward pass: at b=32, q=k=200, d_a=256 that is 1.3 GB per copy, and its peak
holds about three copies. Here the forward pass computes the scores ``chunk``
queries at a time in one reused buffer, ``u = tanh(a_i + b_j)`` (tanh once per
chunk); the backward pass recomputes ``u`` per chunk (the last chunk of the
forward is kept, so a problem that fits in one chunk, e.g. a decoding step, is
never recomputed) and accumulates, with ``w = 1 − u²`` factored so that ``v``
and the plain sums of ``g`` leave the big loop:

    ∂e/∂v   = Σ_ij g_ij u_ij                                  (a batched matmul)
    ∂e/∂a_i = v ⊙ (Σ_j g_ij − Σ_j g_ij u_ij²)
    ∂e/∂b_j = v ⊙ (Σ_i g_ij − Σ_i g_ij u_ij²)

(``g u²`` is formed in place in the buffer, so a chunk costs one
``(b, chunk, k, d_a)`` block and no other temporary of that size.)

Chunk size: at most ``max_elems`` elements per block (default 2**26, 256 MB in
float32) and at most a quarter of the whole ``(b, q, k, d_a)`` tensor (so the
peak stays ≤ 1/4 of the naive version's), unless the whole tensor is small
(≤ 2**22 elements), when one chunk is used; or give ``chunk`` (queries per block).
Few large chunks matter on a busy machine: every op is a parallel region, and
a region waits for its slowest thread. The function takes the *projected*
query and keys, so the keys' projection can be computed once per source
sentence and reused at every decoding step.

Caveats: double backward is not supported (the backward is not itself
differentiable); masks are applied afterwards by ``attnlab.masked_softmax``.
The kept buffer is released by the first backward; a second backward
(``retain_graph=True``) recomputes every chunk.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _checks

DEFAULT_MAX_ELEMS = 1 << 26
SMALL_ELEMS = 1 << 22  # below this, one chunk: chunking buys nothing


def _chunk(b: int, q: int, k: int, d_a: int, chunk: int | None, max_elems: int) -> int:
    """Queries per block: the largest block within the budget, then evened out over the blocks."""
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1; got {chunk}")
        return int(chunk)
    if max_elems < 1:
        raise ValueError(f"max_elems must be >= 1; got {max_elems}")
    per_query = max(1, b * k * d_a)
    total = per_query * q
    budget = max_elems if total <= SMALL_ELEMS else min(max_elems, total // 4)
    c = max(1, min(q, budget // per_query))
    n = -(-q // c)
    return -(-q // n)


def _block(buf: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """A contiguous (B, c, k, d_a) view at the start of the flat buffer."""
    return buf[: shape[0] * shape[1] * shape[2] * shape[3]].view(shape)


def _tanh_block(buf: torch.Tensor, a: torch.Tensor, bb: torch.Tensor, i: int, c: int) -> torch.Tensor:
    """u = tanh(a_i + b_j) for queries i..i+c, written into the buffer: (B, c, k, d_a)."""
    B, _, n_k, d = bb.shape
    u = _block(buf, (B, c, n_k, d))
    return torch.add(a[:, i : i + c].unsqueeze(2), bb, out=u).tanh_()


class ChunkedAdditive(torch.autograd.Function):
    """scores (B, q, k) from a (B, q, d_a), b (B, k, d_a), v (d_a,), computed ``chunk`` queries at a time."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
        B, n_q, d = a.shape
        n_k = b.shape[1]
        out = a.new_empty(B, n_q, n_k)  # (B, q, k)
        buf = a.new_empty(B * min(chunk, n_q) * n_k * d)
        bb = b.unsqueeze(1)  # (B, 1, k, d_a)
        starts = range(0, n_q, chunk)
        for i in starts:
            c = min(chunk, n_q - i)
            u = _tanh_block(buf, a, bb, i, c)  # (B, c, k, d_a)
            if c == n_q:
                torch.matmul(u, v, out=out)
            else:
                out[:, i : i + c] = u @ v
        ctx.save_for_backward(a, b, v)
        ctx.chunk = chunk
        ctx.kept = (buf, starts[-1]) if any(ctx.needs_input_grad[:3]) else None
        return out

    @staticmethod
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None, None]:
        a, b, v = ctx.saved_tensors
        kept, ctx.kept = ctx.kept, None
        chunk = ctx.chunk
        need_a, need_b, need_v = ctx.needs_input_grad[:3]
        B, n_q, d = a.shape
        n_k = b.shape[1]
        grad = grad.contiguous()  # (B, q, k)
        buf = kept[0] if kept is not None else a.new_empty(B * min(chunk, n_q) * n_k * d)
        sa = a.new_empty(B, n_q, d) if need_a else None  # Σ_j g_ij u_ij²
        sb = b.new_zeros(B, n_k, d) if need_b else None  # Σ_i g_ij u_ij²
        grad_v = v.new_zeros(d) if need_v else None
        bb = b.unsqueeze(1)
        for i in reversed(range(0, n_q, chunk)):  # the kept block (the last) first
            c = min(chunk, n_q - i)
            if kept is not None and i == kept[1]:
                u = _block(buf, (B, c, n_k, d))
            else:
                u = _tanh_block(buf, a, bb, i, c)  # (B, c, k, d_a)
            g = grad[:, i : i + c]  # (B, c, k)
            if grad_v is not None:  # need_v
                grad_v += torch.bmm(g.reshape(-1, 1, n_k), u.view(-1, n_k, d)).view(-1, d).sum(0)
            if need_a or need_b:
                x = u.mul_(u).mul_(g.unsqueeze(-1))  # g u², in place: (B, c, k, d_a)
                if sa is not None:  # need_a
                    if c == n_q:
                        torch.sum(x, 2, out=sa)
                    else:
                        sa[:, i : i + c] = x.sum(2)
                if sb is not None:  # need_b
                    sb += x.sum(1)
        grad_a = (grad.sum(2, keepdim=True) - sa).mul_(v) if sa is not None else None
        grad_b = (grad.sum(1).unsqueeze(-1) - sb).mul_(v) if sb is not None else None
        return grad_a, grad_b, grad_v, None


def chunked_additive_scores(
    projected_query: torch.Tensor,
    projected_keys: torch.Tensor,
    v: torch.Tensor,
    *,
    chunk: int | None = None,
    max_elems: int = DEFAULT_MAX_ELEMS,
) -> torch.Tensor:
    """e_ij = vᵀ tanh(a_i + b_j) without holding the (..., q, k, d_a) tensor.

    projected_query a: (..., q, d_a) (= W_q q); projected_keys b: (..., k, d_a)
    (= W_k k); v: (d_a,). Leading dimensions broadcast. Returns (..., q, k).
    """
    _checks.tensor("projected_query", projected_query, 2)
    _checks.tensor("projected_keys", projected_keys, 2)
    _checks.tensor("v", v, 1)
    d_a = v.shape[0]
    _checks.param("v", v, (d_a,), "the additive score's vector v, (d_a,)")
    for name, t in (("projected_query", projected_query), ("projected_keys", projected_keys)):
        if t.shape[-1] != d_a:
            raise ValueError(f"{name} must end in d_a={d_a} (the size of v); got shape {_checks.shape(t)}")
    lead = projected_query.shape[:-2]
    if projected_keys.shape[:-2] != lead:  # (torch.broadcast_shapes costs a Python call, and an import the first time)
        lead = _checks.leading_broadcast(("projected_query", "projected_keys"), (projected_query, projected_keys))
    a = projected_query.expand(*lead, *projected_query.shape[-2:])
    b = projected_keys.expand(*lead, *projected_keys.shape[-2:])
    if a.numel() == 0 or b.numel() == 0:  # empty input (b, q or k = 0): the empty scores, still on the graph
        return torch.tanh(a.unsqueeze(-2) + b.unsqueeze(-3)) @ v  # (..., q, k)
    a, b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    if _checks.autocasting(a):  # the kernel's matmuls write into buffers (out=), which autocast does not cast
        dt = torch.get_autocast_dtype(a.device.type)
        a, b, v = a.to(dt), b.to(dt), v.to(dt)
    c = _chunk(a.shape[0], a.shape[1], b.shape[1], d_a, chunk, max_elems)
    out = ChunkedAdditive.apply(a, b, v, c)  # (B, q, k)
    return out.reshape(*lead, a.shape[1], b.shape[1])


__all__ = ["ChunkedAdditive", "chunked_additive_scores", "DEFAULT_MAX_ELEMS", "SMALL_ELEMS"]
