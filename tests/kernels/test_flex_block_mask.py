"""The flex ``BlockMask`` of a pattern, built from its block structure (what CUDA runs), on the CPU.

Checked against ``create_block_mask`` (flex's own builder, which evaluates the mask at every
pair) on small lengths: the same partial and full tiles, in the same order. At n = 1,048,576
the window's mask is built in seconds with tables of (n/B)² int32, no n² evaluation.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

from attnlab import patterns
from attnlab.kernels import devices, flex_mask

PATTERNS = {
    "window": patterns.sliding_window(100),
    "asymmetric window": patterns.sliding_window(30, 70),
    "causal": patterns.causal(),
    "documents": patterns.documents([100, 37, 300, 11]),
    "causal documents": patterns.documents([100, 37, 300, 11], causal=True),
    "causal window | globals": patterns.causal() & patterns.sliding_window(50) | patterns.global_tokens([0, 5]),
    "random blocks": patterns.random_blocks(2, 32, 1),
    "2-D neighbourhood": patterns.neighborhood_2d(12, 20, 3),
}

TABLES = [("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices"),
          ("q_num_blocks", "q_indices"), ("full_q_num_blocks", "full_q_indices")]


def _rows(bm, counts, indices):
    c, i = getattr(bm, counts)[0, 0], getattr(bm, indices)[0, 0]
    return [i[r, : c[r]].tolist() for r in range(len(c))]


@pytest.mark.parametrize("n", [240, 448, 450])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_the_block_mask_equals_flexs_own_builder(name, n):
    pattern = PATTERNS[name]
    ours = devices.block_mask(pattern, n, "cpu", 64)
    allows = flex_mask._index_fn(pattern, n, "cpu")

    def mask_mod(b, h, q, k):
        return allows(q.clamp(max=n - 1), k.clamp(max=n - 1)) & (q < n) & (k < n)

    theirs = create_block_mask(mask_mod, None, None, n, n, device="cpu", BLOCK_SIZE=64)
    for counts, indices in TABLES:
        assert torch.equal(getattr(ours, counts), getattr(theirs, counts)), counts
        assert _rows(ours, counts, indices) == _rows(theirs, counts, indices), indices
    assert torch.equal(ours.to_dense(), theirs.to_dense())


def test_a_window_over_a_million_tokens_is_built_from_its_tiles_in_seconds():
    n, block, w = 1 << 20, 128, 256
    start = time.perf_counter()
    tiles, kind = devices.tile_kinds(patterns.sliding_window(w), n, block, "cpu")
    nb = n // block
    assert len(tiles) <= nb * (2 * w // block + 3)  # only the tiles the band touches: O(n·w / B²)
    assert int((kind == 2).sum()) == nb * (2 * w // block - 1) - 2 * sum(range(1, 2))  # interior tiles are full
    bm = devices.block_mask(patterns.sliding_window(w), n, "cpu", block)
    took = time.perf_counter() - start
    tables = [getattr(bm, name) for pair in TABLES for name in pair]
    held = sum(t.numel() * t.element_size() for t in tables)
    assert held <= 4 * nb * nb * 4 + 4 * nb * 4  # flex's four (n/B)² int32 tables and their counts, nothing else
    assert took < 60, f"built in {took:.1f} s"
    assert int(bm.kv_num_blocks.sum() + bm.full_kv_num_blocks.sum()) == len(tiles)


def test_heads_narrower_than_flexs_minimum_are_padded_with_zero_features():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 2, 100, 4, generator=g) for _ in range(2))
    v = torch.randn(2, 2, 100, 8, generator=g)
    pattern = patterns.sliding_window(10)
    out = devices.flex_pattern_attention(q, k, v, pattern, None, 0.5, compiled=False)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=pattern.materialize(100), scale=0.5)
    assert out.shape == want.shape
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def test_documents_index_function_is_a_table_lookup_that_flex_can_lower():
    """varlen's pattern on CUDA: the index function holds one table and makes no tensor of its own."""
    pattern = patterns.documents([3, 2, 4], causal=True)
    allows = flex_mask._index_fn(pattern, 9, "cpu")
    i = torch.arange(12)
    got = allows(i[:, None], i[None, :])
    want = pattern.allows(i[:, None], i[None, :], 9) & (i[:, None] < 9) & (i[None, :] < 9)
    assert torch.equal(got[:9, :9], want[:9, :9])
