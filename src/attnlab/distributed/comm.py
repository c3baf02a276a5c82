"""Differentiable point-to-point exchange between processes (the ring's and the halo's transport).

``exchange(sends, recvs, like, group)`` sends each ``(tensor, dst)`` and receives
each ``(shape, src)`` in one batch of ``torch.distributed`` P2P operations; its
backward runs the same exchange the other way round (the gradient of a received
tensor goes back to the rank it came from and arrives as the gradient of what was
sent). Ranks are ranks *in the group*.

Every rank must run the backward of every exchange it took part in, in the same
order, or a peer waits for ever. So each exchange also returns a scalar *token*,
and the caller ties all tokens into its output with ``tie`` (the identity, whose
backward hands each token a zero gradient): the backward then reaches every
exchange, also on a rank that received nothing or used nothing it received.

``rotate_(tensors, group)`` passes contiguous tensors one rank on round the ring, in place and
without autograd (ring attention's forward and its own backward, ``ring.py``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _peer(group, rank: int) -> int:
    return dist.get_global_rank(group, rank) if group is not None else rank


def _p2p(sends, recv_bufs, group) -> None:
    ops = [dist.P2POp(dist.isend, t.contiguous(), _peer(group, d), group) for t, d in sends]
    ops += [dist.P2POp(dist.irecv, b, _peer(group, s), group) for b, s in recv_bufs]
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, dsts, recv_specs, like, *tensors):
        ctx.group, ctx.dsts = group, dsts
        ctx.srcs = [s for _, s in recv_specs]
        ctx.recv_shapes = [shape for shape, _ in recv_specs]
        ctx.send_shapes = [t.shape for t in tensors]
        ctx.dtype, ctx.device = like.dtype, like.device
        bufs = [torch.empty(shape, dtype=like.dtype, device=like.device) for shape in ctx.recv_shapes]
        _p2p(list(zip(tensors, dsts)), list(zip(bufs, ctx.srcs)), group)
        token = torch.zeros((), dtype=like.dtype, device=like.device)
        return (*bufs, token)

    @staticmethod
    def backward(ctx, *grads):
        grads = [torch.zeros(s, dtype=ctx.dtype, device=ctx.device) if g is None else g
                 for g, s in zip(grads[:-1], ctx.recv_shapes)]
        back = [torch.empty(s, dtype=ctx.dtype, device=ctx.device) for s in ctx.send_shapes]
        _p2p(list(zip(grads, ctx.srcs)), list(zip(back, ctx.dsts)), ctx.group)
        return (None, None, None, None, *back)


def exchange(sends, recvs, like: torch.Tensor, group=None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Send ``(tensor, dst)`` pairs and receive tensors of ``(shape, src)`` → (received, token).

    Received tensors take ``like``'s dtype and device; sent tensors must have them too. Each
    send must be matched by a receive of the same shape on its destination."""
    out = _Exchange.apply(group, [d for _, d in sends], [(tuple(s), src) for s, src in recvs], like,
                          *[t.to(like.dtype) for t, _ in sends])
    return list(out[:-1]), out[-1]


class _Tie(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out, *tokens):
        ctx.n = len(tokens)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        return (grad, *[torch.zeros((), dtype=grad.dtype, device=grad.device)] * ctx.n)


def tie(out: torch.Tensor, tokens: list[torch.Tensor]) -> torch.Tensor:
    """``out`` unchanged; its backward also runs the backward of the exchanges behind ``tokens``."""
    return _Tie.apply(out, *tokens) if tokens else out


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, dim, x):
        ctx.group, ctx.dim = group, dim
        ctx.rank, size = dist.get_rank(group), dist.get_world_size(group)
        ctx.part = x.shape[dim]
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()  # each rank's slice gets the sum of every rank's gradient for it
        dist.all_reduce(grad, group=ctx.group)
        return None, None, grad.narrow(ctx.dim, ctx.rank * ctx.part, ctx.part)


def all_gather(x: torch.Tensor, dim: int, group=None) -> torch.Tensor:
    """The ranks' ``x`` concatenated along ``dim`` in rank order; differentiable (the backward sums)."""
    return _AllGather.apply(group, dim, x)


def _all_to_all(chunks: list[torch.Tensor], group) -> list[torch.Tensor]:
    """out[i] = rank i's chunks[my rank]. gloo has no all_to_all: one scatter from each rank, named by
    its rank in ``group`` (torch.distributed.nn's all_to_all passes it as a global rank, which fails in
    a group smaller than the world)."""
    out = [torch.empty_like(c) for c in chunks]
    if dist.get_backend(group) != dist.Backend.GLOO:
        dist.all_to_all(out, chunks, group=group)
        return out
    me = dist.get_rank(group)
    for i in range(len(chunks)):
        dist.scatter(out[i], chunks if i == me else None, group=group, group_src=i)
    return out


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, *chunks):
        ctx.group = group
        return tuple(_all_to_all([c.contiguous() for c in chunks], group))

    @staticmethod
    def backward(ctx, *grads):  # the gradient of what rank i received goes back to rank i: the same exchange
        return (None, *_all_to_all([g.contiguous() for g in grads], ctx.group))


def all_to_all(chunks: list[torch.Tensor], group=None) -> list[torch.Tensor]:
    """Chunk i of every rank to rank i: returns, in rank order, what each rank sent this one
    (one chunk per rank of ``group``, each the same shape on every rank); differentiable."""
    return list(_AllToAll.apply(group, *chunks))


def rotate_(tensors: list[torch.Tensor], group=None, chunks: int = 8) -> None:
    """Pass each contiguous tensor to the next rank of the ring, in place: it then holds the previous
    rank's. No autograd. The exchange goes ``chunks`` pieces at a time through one buffer of a
    piece's size, so a tensor in flight costs 1/chunks of its size on top of itself, not a copy."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if size == 1:
        return
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for t in tensors:
        flat = t.view(-1)
        step = max(1, -(-flat.numel() // chunks))
        buf = flat.new_empty(min(step, flat.numel()))
        for a in range(0, flat.numel(), step):
            part = flat[a : a + step]
            got = buf[: part.numel()]
            _p2p([(part, nxt)], [(got, prv)], group)  # both done: part was sent before it is overwritten
            part.copy_(got)


__all__ = ["all_gather", "all_to_all", "exchange", "rotate_", "tie"]
