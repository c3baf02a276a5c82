"""A Triton forward kernel that keeps the non-finite rule with no pass over the inputs.

FlashAttention's forward (Dao et al. 2022, https://arxiv.org/abs/2205.14135) with key padding and
causal masking, in which a masked key or value is never read into the arithmetic:

    s_ij = scale · q_i·k_j        over the keys j < length[b] (and j <= i + k − q when causal)
    o_i  = Σ_j softmax_j(s_ij) v_j, computed block by block with a running maximum (online softmax)

* the padded key rows are loaded as zeros (``tl.load(..., mask=j < length, other=0)``): their
  memory is not read at all, so a NaN or inf there cannot reach an output;
* keys and values that one row may attend and another may not (the causal diagonal blocks) are
  cleaned in registers, and each row keeps a flag of whether it may attend a non-finite key or
  value row: such a row's output is NaN, as is the row of a non-finite query (the rule of
  ``attnlab.functional.nonfinite``);
* a row that may attend no key gives zeros.

Shapes: query (b, h, q, d), key (b, h, k, d), value (b, h, k, d_v); ``lengths`` (b,) int, the
real keys of each sequence (default: all); causal is bottom-right aligned (the queries are the last
q positions). Every product is in float32 (``input_precision="ieee"``: not TF32, which a GPU's
``tl.dot`` takes by default). Forward only (no gradient). Needs Triton; on the CPU it runs under Triton's
interpreter (``TRITON_INTERPRET=1``), which is how the tests check it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import _checks

try:  # an optional dependency: the kernel exists where Triton does
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the environment
    triton = None


if triton is not None:

    @triton.jit
    def _nonfinite(x: Any) -> Any:
        """(rows, cols) → (rows,) True where a row holds NaN or ±inf (x − x is NaN there, 0 elsewhere)."""
        return tl.sum(((x - x) != 0).to(tl.int32), 1) > 0

    @triton.jit
    def _clean(x: Any) -> Any:
        return tl.where(x - x == 0, x, 0.0)

    @triton.jit
    def _forward(Q, K, V, OUT, LEN, strides, sizes, scale,  # type: ignore[no-untyped-def]  # noqa: N803
                 CAUSAL: tl.constexpr, B: tl.constexpr, BD: tl.constexpr, BDV: tl.constexpr):
        """One program: B query rows of one (sequence, head), over all its keys, B at a time."""
        sq_bh, sq_n, sk_bh, sk_n, sv_bh, sv_n, so_bh, so_n = strides
        n_q, n_k, d, d_v, h = sizes
        rows, bh = tl.program_id(0) * B + tl.arange(0, B), tl.program_id(1)
        length = tl.minimum(tl.load(LEN + bh // h), n_k)
        fd, fv = tl.arange(0, BD), tl.arange(0, BDV)
        q = tl.load(Q + bh * sq_bh + rows[:, None] * sq_n + fd[None, :], mask=(rows[:, None] < n_q) & (fd[None, :] < d),
                    other=0.0).to(tl.float32)  # (B, BD)
        hit, q = _nonfinite(q), _clean(q)  # a non-finite query: its own row is NaN
        top = tl.full((B,), float("-inf"), tl.float32)
        total, seen = tl.zeros((B,), tl.float32), tl.zeros((B,), tl.int32)
        acc = tl.zeros((B, BDV), tl.float32)
        for start in range(0, n_k, B):
            cols = start + tl.arange(0, B)
            real = cols < length  # the padded rows are never read: loaded as zeros
            k = tl.load(K + bh * sk_bh + cols[:, None] * sk_n + fd[None, :], mask=real[:, None] & (fd[None, :] < d),
                        other=0.0).to(tl.float32)  # (B, BD)
            v = tl.load(V + bh * sv_bh + cols[:, None] * sv_n + fv[None, :], mask=real[:, None] & (fv[None, :] < d_v),
                        other=0.0).to(tl.float32)  # (B, BDV)
            bad = _nonfinite(k) | _nonfinite(v)  # (B,)
            k, v = _clean(k), _clean(v)
            ok = real[None, :] & (rows[:, None] < n_q)  # (B, B) may attend
            if CAUSAL:
                ok = ok & (cols[None, :] <= rows[:, None] + (n_k - n_q))
            hit = hit | (tl.sum((ok & bad[None, :]).to(tl.int32), 1) > 0)
            seen += tl.sum(ok.to(tl.int32), 1)
            s = tl.where(ok, tl.dot(q, tl.trans(k), input_precision="ieee") * scale, float("-inf"))  # (B, B)
            new = tl.maximum(top, tl.max(s, 1))
            base = tl.where(new == float("-inf"), 0.0, new)
            p = tl.exp(s - base[:, None])  # 0 where masked
            alpha = tl.exp(top - base)
            total = total * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
            top = new
        out = acc / tl.where(total > 0, total, 1.0)[:, None]
        out = tl.where(hit[:, None], float("nan"), out)
        out = tl.where(seen[:, None] == 0, 0.0, out)  # a row with no key: zeros (they win over NaN)
        tl.store(OUT + bh * so_bh + rows[:, None] * so_n + fv[None, :], out.to(OUT.dtype.element_ty),
                 mask=(rows[:, None] < n_q) & (fv[None, :] < d_v))


def triton_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    lengths: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    block: int = 16,
) -> torch.Tensor:
    """softmax(q kᵀ · scale) v over the real keys (``lengths``) and, with ``causal``, the past: (b, h, q, d_v)."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _checks.tensor(name, t).dim() != 4:
            raise ValueError(f"{name} must be (b, h, n, d); got shape {_checks.shape(t)}")
    b, h, n_q, d = query.shape
    n_k, d_v = key.shape[2], value.shape[3]
    if key.shape != (b, h, n_k, d) or value.shape[:3] != (b, h, n_k):
        raise ValueError(f"query (b, h, q, d), key (b, h, k, d) and value (b, h, k, d_v) must agree; got "
                         f"{_checks.shape(query)}, {_checks.shape(key)}, {_checks.shape(value)}")
    if lengths is None:
        lengths = torch.full((b,), n_k, dtype=torch.int32, device=query.device)
    lengths = lengths.to(device=query.device, dtype=torch.int32)
    if lengths.shape != (b,):
        raise ValueError(f"lengths must be (b,) = ({b},); got shape {_checks.shape(lengths)}")
    q, k, v = (t.contiguous().view(b * h, t.shape[2], t.shape[3]) for t in (query, key, value))
    out = torch.empty(b * h, n_q, d_v, dtype=query.dtype, device=query.device)
    if triton is None:
        raise ValueError("triton_attention needs Triton (pip install triton); it is not installed here")
    grid = (triton.cdiv(max(n_q, 1), block), b * h)
    strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1))
    _forward[grid](q, k, v, out, lengths, strides, (n_q, n_k, d, d_v, h),
                   1.0 / math.sqrt(d) if scale is None else float(scale), CAUSAL=bool(causal), B=block,
                   BD=max(16, triton.next_power_of_2(d)), BDV=max(16, triton.next_power_of_2(d_v)))
    return out.view(b, h, n_q, d_v)


__all__ = ["triton_attention"]
