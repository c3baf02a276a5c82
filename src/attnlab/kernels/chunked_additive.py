"""Memory-bounded additive (Bahdanau) scores: a custom autograd function that works in chunks.

    e_ij = vᵀ tanh(a_i + b_j),   a_i = W_q q_i  (b, q, d_a),   b_j = W_k k_j  (b, k, d_a)

Bahdanau, Cho & Bengio 2015, "Neural Machine Translation by Jointly Learning to
Align and Translate", https://arxiv.org/abs/1409.0473 (eq. 6 of appendix A).

The readable reference (``attnlab.scores.additive``) broadcasts ``a_i + b_j`` to
a ``(b, q, k, d_a)`` tensor, and autograd keeps it (and its tanh) for the
backward pass: at b=32, q=k=200, d_a=256 that is 1.3 GB per copy. Here the
forward pass computes the scores ``chunk`` queries at a time and keeps only the
inputs; the backward pass recomputes ``u = tanh(a_i + b_j)`` per chunk and
accumulates

    ∂e/∂a_i = Σ_j g_ij v ⊙ (1 − u_ij²),   ∂e/∂b_j = Σ_i g_ij v ⊙ (1 − u_ij²),   ∂e/∂v = Σ_ij g_ij u_ij

so at most a ``(b, chunk, k, d_a)`` block is alive at any time. The chunk size
is chosen from a budget of elements (``max_elems``, default 2**24 ≈ 64 MB in
float32), or given. The function takes the *projected* query and keys, so the
keys' projection can be computed once per source sentence and reused at every
decoding step.

Caveats: double backward is not supported (the backward is not itself
differentiable); masks are applied afterwards by ``attnlab.masked_softmax``.
"""

from __future__ import annotations

import torch

from .. import _checks

DEFAULT_MAX_ELEMS = 1 << 24


def _chunk(b: int, k: int, d_a: int, chunk: int | None, max_elems: int) -> int:
    if chunk is not None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1; got {chunk}")
        return int(chunk)
    return max(1, max_elems // max(1, b * k * d_a))


class ChunkedAdditive(torch.autograd.Function):
    """scores (B, q, k) from a (B, q, d_a), b (B, k, d_a), v (d_a,), computed ``chunk`` queries at a time."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
        ctx.save_for_backward(a, b, v)
        ctx.chunk = chunk
        n_q = a.shape[1]
        out = a.new_empty(a.shape[0], n_q, b.shape[1])  # (B, q, k)
        bb = b.unsqueeze(1)  # (B, 1, k, d_a)
        for i in range(0, n_q, chunk):
            u = torch.tanh_(a[:, i : i + chunk].unsqueeze(2) + bb)  # (B, c, k, d_a)
            out[:, i : i + chunk] = u @ v
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        a, b, v = ctx.saved_tensors
        chunk = ctx.chunk
        need_a, need_b, need_v = ctx.needs_input_grad[:3]
        grad_a = torch.empty_like(a) if need_a else None
        grad_b = torch.zeros_like(b) if need_b else None
        grad_v = torch.zeros_like(v) if need_v else None
        bb = b.unsqueeze(1)
        for i in range(0, a.shape[1], chunk):
            u = torch.tanh_(a[:, i : i + chunk].unsqueeze(2) + bb)  # (B, c, k, d_a)
            g = grad[:, i : i + chunk]  # (B, c, k)
            if need_v:
                grad_v += (g.reshape(1, -1) @ u.reshape(-1, u.shape[-1])).squeeze(0)
            if need_a or need_b:
                gp = u.mul_(u).neg_().add_(1).mul_(g.unsqueeze(-1)).mul_(v)  # (B, c, k, d_a): ∂e/∂(a_i + b_j)
                if need_a:
                    grad_a[:, i : i + chunk] = gp.sum(2)
                if need_b:
                    grad_b += gp.sum(1)
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
    lead = _checks.leading_broadcast(("projected_query", "projected_keys"), (projected_query, projected_keys))
    a = projected_query.expand(*lead, *projected_query.shape[-2:]).reshape(-1, *projected_query.shape[-2:])
    b = projected_keys.expand(*lead, *projected_keys.shape[-2:]).reshape(-1, *projected_keys.shape[-2:])
    c = _chunk(a.shape[0], b.shape[1], d_a, chunk, max_elems)
    out = ChunkedAdditive.apply(a, b, v, c)  # (B, q, k)
    return out.reshape(*lead, a.shape[1], b.shape[1])


__all__ = ["ChunkedAdditive", "chunked_additive_scores", "DEFAULT_MAX_ELEMS"]
