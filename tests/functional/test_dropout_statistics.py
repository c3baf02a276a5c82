"""Attention dropout, checked statistically: the drop rate is p, kept weights are scaled by 1/(1 − p),
so the output's mean is the dropout-free output, and masked positions stay zero.

With the values an identity matrix, the output row *is* the dropped weight row, so every
property can be read off directly. Each check draws N independent masks (a batch of N copies)
and compares a mean with its expectation within 6 standard errors, the standard error
computed here from the Bernoulli variance (a false alarm has probability < 1e-8)."""

from __future__ import annotations

import math

import pytest
import torch

import attnlab
from attnlab import patterns as P
from attnlab.kernels import block_sparse_attention

N, K, p = 4000, 8, 0.5


def _check(dropped: torch.Tensor, weights: torch.Tensor, allowed: torch.Tensor):
    """dropped (N, ..., K) draws of one weight row `weights` (..., K); allowed (..., K) bool."""
    kept = dropped != 0
    live = allowed & (weights > 0)
    rate = 1 - kept[:, live].double().mean().item()
    assert abs(rate - p) < 6 * math.sqrt(p * (1 - p) / (N * int(live.sum()))), f"drop rate {rate}, p = {p}"
    scaled = dropped[kept] / weights.expand_as(dropped)[kept]
    torch.testing.assert_close(scaled, torch.full_like(scaled, 1 / (1 - p)))  # kept weights × 1/(1 − p)
    mean = dropped.double().mean(0)
    se = weights.double() * math.sqrt(p / (1 - p)) / math.sqrt(N)  # sd of w·m/(1−p) is w·√(p/(1−p))
    assert torch.all((mean - weights.double()).abs() <= 6 * se + 1e-12), "the mean output is not preserved"
    assert torch.all(dropped[:, ~allowed] == 0), "a masked position got weight"


def test_core_attention_dropout():
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 4), torch.randn(1, K, 4)
    v = torch.eye(K)[None]  # (1, K, K): the output row is the weight row
    mask = torch.tensor([True] * 6 + [False] * 2)[None, None]  # (1, 1, K): two padded keys
    _, w = attnlab.attention(q, k, v, mask=mask, need_weights=True)
    out, _ = attnlab.attention(q.expand(N, 1, 4), k.expand(N, K, 4), v.expand(N, K, K), mask=mask, dropout_p=p)
    _check(out[:, 0], w[0, 0], mask[0, 0])


def test_multi_head_attention_dropout():
    torch.manual_seed(1)
    m = attnlab.nn.MultiHeadAttention(K, 2, attn_drop=p).train()
    x = torch.randn(1, 5, K)
    with torch.no_grad():
        ref = m.eval()(x)[0]
        outs = m.train()(x.expand(N, 5, K).contiguous())[0]
    # the output is linear in the (dropped) weights: its mean over draws is the dropout-free output
    sd = outs.double().std(0)
    assert torch.all((outs.double().mean(0) - ref.double()).abs() <= 6 * sd / math.sqrt(N) + 1e-6)
    assert not torch.allclose(outs[0], outs[1])  # dropout is on in training


@pytest.mark.parametrize("pattern", [P.sliding_window(2), P.sliding_window(1) | P.global_tokens([0])], ids=["window", "longformer"])
def test_block_sparse_dropout(pattern):
    torch.manual_seed(2)
    n = K
    q, k = torch.randn(1, 1, n, 4), torch.randn(1, 1, n, 4)
    v = torch.eye(n)[None, None]  # (1, 1, n, n)
    allowed = pattern.materialize(n)  # (n, n)
    ref, _ = attnlab.attention(q, k, v, mask=allowed)  # the weights, dropout-free
    out, _ = block_sparse_attention(q.expand(N, 1, n, 4), k.expand(N, 1, n, 4), v.expand(N, 1, n, n), pattern,
                                    block=4, dropout_p=p)
    for i in range(n):  # each query row
        _check(out[:, 0, i], ref[0, 0, i], allowed[i])
