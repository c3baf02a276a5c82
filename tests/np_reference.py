"""An independent float64 NumPy implementation of the core, written for the tests.

It follows the formulas of the papers directly (loops where that is clearest)
and shares no code with attnlab.
"""

from __future__ import annotations

import numpy as np


def dot(q, k):
    return np.einsum("...qd,...kd->...qk", q, k)


def scaled_dot(q, k, scale=None):
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    return dot(q, k) * s


def general(q, k, W):
    # e_ij = q_i^T W k_j
    return np.einsum("...qa,ab,...kb->...qk", q, W, k)


def additive(q, k, Wq, Wk, v):
    out = np.empty(q.shape[:-1] + (k.shape[-2],))
    for idx in np.ndindex(*q.shape[:-2]) if q.ndim > 2 else [()]:
        qq, kk = q[idx], k[idx] if k.ndim > 2 else k
        for i in range(qq.shape[0]):
            for j in range(kk.shape[0]):
                out[idx + (i, j)] = v @ np.tanh(Wq @ qq[i] + Wk @ kk[j])
    return out


def concat(q, k, W, v):
    out = np.empty(q.shape[:-1] + (k.shape[-2],))
    for idx in np.ndindex(*q.shape[:-2]) if q.ndim > 2 else [()]:
        qq, kk = q[idx], k[idx] if k.ndim > 2 else k
        for i in range(qq.shape[0]):
            for j in range(kk.shape[0]):
                out[idx + (i, j)] = v @ np.tanh(W @ np.concatenate([qq[i], kk[j]]))
    return out


def softmax(scores, allowed=None):
    """Row softmax over the allowed entries; rows with none allowed are all zero."""
    scores = np.asarray(scores, dtype=np.float64)
    if allowed is None:
        allowed = np.ones(scores.shape, dtype=bool)
    allowed = np.broadcast_to(allowed, scores.shape)
    out = np.zeros_like(scores)
    for idx in np.ndindex(*scores.shape[:-1]):
        row, ok = scores[idx], allowed[idx]
        if ok.any():
            m = row[ok].max()
            e = np.where(ok, np.exp(np.where(ok, row, m) - m), 0.0)
            out[idx] = e / e.sum()
    return out


def attention(q, k, v, scores_fn=scaled_dot, allowed=None, bias=None):
    e = scores_fn(q, k)
    if bias is not None:
        e = e + bias
        ok = np.isfinite(np.broadcast_to(bias, e.shape))
        allowed = ok if allowed is None else (allowed & ok)
        e = np.where(ok, e, 0.0)
    w = softmax(e, allowed)
    return np.einsum("...qk,...kd->...qd", w, v), w


def attention_lse(q, k, v, allow, scale):
    """Masked attention of one (q, d) × (k, d) head with its log-sum-exp: (out (q, d_v), lse (q,)).

    A row that may attend nothing gets a zero output and lse = −∞ (the kernels' contract)."""
    s = np.where(allow, scale * q @ k.T, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    out = np.where(z > 0, e / np.where(z > 0, z, 1.0), 0.0) @ v
    lse = np.where(z[:, 0] > 0, np.log(np.where(z[:, 0] > 0, z[:, 0], 1.0)) + m[:, 0], -np.inf)
    return out, lse


def window_start(i, length, kernel, dilation):
    """NATTEN (csrc, natten_commons): the first key index of query i's window along one axis."""
    half = kernel // 2
    if dilation <= 1:
        return max(i - half, 0) + (i + half >= length) * (length - i - half - 1)
    ni = i - half * dilation
    if ni < 0:
        return i % dilation
    if i + half * dilation >= length:
        imodd = i % dilation
        a = (length // dilation) * dilation
        b = length - a
        if imodd < b:
            return length - b + imodd - 2 * half * dilation
        return a + imodd - kernel * dilation
    return ni


def natten_mask(H, W, kernel, dilation):
    """(H·W, H·W) bool: query r·W + c sees the kernel × kernel window NATTEN gives it (row-major grid)."""
    n = H * W
    m = np.zeros((n, n), dtype=bool)
    for r in range(H):
        for c in range(W):
            r0, c0 = window_start(r, H, kernel, dilation), window_start(c, W, kernel, dilation)
            for a in range(kernel):
                for b in range(kernel):
                    m[r * W + c, (r0 + a * dilation) * W + (c0 + b * dilation)] = True
    return m
