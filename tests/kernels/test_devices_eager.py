"""The CUDA backend's pieces, run eagerly on the CPU (no dynamo, so they run under mutmut too):

* the index function ``_index_fn`` builds for flex (``(q_idx, kv_idx) -> bool``) against loop masks written
  here from each pattern's definition, also beyond n (flex evaluates padded tiles) and under ``torch.vmap``;
* ``block_mask``: its tiles against the tiles of the loop mask, its tile size, one mask per (n, device, block);
* ``flex_pattern_attention`` and ``_flex`` through flex's own eager path
  (``_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG``: the hop runs without ``torch.compile``) against float64
  softmax attention over a loop mask: o_i = Σ_{j allowed} softmax_j(q_i·k_j · scale) v_j, ℓ_i = log Σ_j exp(s_ij);
* ``_flex_fn``: ``torch.compile`` is called once, on flex_attention, with ``dynamic=False`` (a spy).
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.attention.flex_attention as FA

from attnlab import kernels as K
from attnlab import patterns as P
from attnlab.functional.attention import attention
from attnlab.kernels import devices, flex_mask

pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop", "ignore:flex_attention called without")


def grid(fn, m):
    """fn evaluated on every (q, k) in [0, m)² by broadcasting: (m, m) bool numpy."""
    i = torch.arange(m)
    return fn(i[:, None], i[None, :]).numpy()


def loop(rule, m):
    return np.array([[bool(rule(i, j)) for j in range(m)] for i in range(m)])


LAYOUT = [[1, 0, 0], [1, 1, 0], [0, 1, 1]]  # rows and columns all different, last tile allowed


def layout_rule(i, j, blk=3, lay=LAYOUT):
    nb = len(lay)
    return i < nb * blk and j < nb * blk and lay[i // blk][j // blk]


def test_index_fn_of_a_block_layout_follows_the_layout_and_is_false_past_its_tiles():
    pattern = P.block_sparse(torch.tensor(LAYOUT, dtype=torch.bool), 3)  # n = 8: 3 tiles cover 0..8
    fn = flex_mask._index_fn(pattern, 8, "cpu")
    np.testing.assert_array_equal(grid(fn, 15), loop(layout_rule, 15))  # indices up to 14: padded tiles


@pytest.mark.parametrize("op", ["or", "and"])
def test_index_fn_of_global_tokens_combined_with_a_block_layout(op):
    g = P.global_tokens([1, 8, 9])  # 8 = n and 9 > n: no such position
    b = P.block_sparse(torch.tensor(LAYOUT, dtype=torch.bool), 3)
    pattern = g | b if op == "or" else g & b
    fn = flex_mask._index_fn(pattern, 8, "cpu")

    def rule(i, j):
        glob = i == 1 or j == 1
        return (glob or layout_rule(i, j)) if op == "or" else (glob and layout_rule(i, j))

    np.testing.assert_array_equal(grid(fn, 8), loop(rule, 8))
    np.testing.assert_array_equal(grid(flex_mask._index_fn(b | g, 8, "cpu"), 8), loop(
        lambda i, j: layout_rule(i, j) or i == 1 or j == 1, 8))


def test_index_fn_of_a_pattern_without_a_layout_is_its_allows_with_n():
    class LastKeys(P.Pattern):  # a user's pattern whose rule reads n: the last two keys, and the diagonal
        def allows(self, q_idx, kv_idx, n):
            return (kv_idx >= n - 2) | (kv_idx == q_idx)

    np.testing.assert_array_equal(grid(flex_mask._index_fn(LastKeys(), 7, "cpu"), 7),
                                  loop(lambda i, j: j >= 5 or i == j, 7))
    fixed = P.fixed(4, 1)  # has a `block` but no layout: its own rule
    np.testing.assert_array_equal(grid(flex_mask._index_fn(fixed, 9, "cpu"), 9),
                                  loop(lambda i, j: i // 4 == j // 4 or j % 4 == 3, 9))


def test_index_fn_of_random_blocks_draws_its_layout_before_vmap():
    pattern = P.random_blocks(1, 4, seed=3)  # fresh: its layout is drawn on first use
    fn = flex_mask._index_fn(pattern, 10, "cpu")
    i = torch.arange(12)
    got = torch.vmap(torch.vmap(fn, in_dims=(None, 0)), in_dims=(0, None))(i, i)  # as flex evaluates it
    lay = pattern.layout_for(10).tolist()  # the drawn layout: one key tile per query tile
    assert all(sum(row) == 1 for row in lay)
    np.testing.assert_array_equal(got.numpy(), loop(lambda a, b: layout_rule(a, b, 4, lay), 12))


def tiles(allow, blk):
    m = allow.shape[0]
    nb = -(-m // blk)
    return np.array([[allow[r * blk:(r + 1) * blk, c * blk:(c + 1) * blk].any() for c in range(nb)] for r in range(nb)])


def test_block_mask_holds_the_tiles_of_the_pattern_and_its_tile_size():
    pattern = P.global_tokens([6]) | P.sliding_window(1)  # n = 10, tiles of 4: 3 tiles, the last partial
    bm = devices.block_mask(pattern, 10, "cpu", 4)
    want = loop(lambda i, j: i == 6 or j == 6 or abs(i - j) <= 1, 10)
    assert bm.BLOCK_SIZE == (4, 4)
    np.testing.assert_array_equal(bm.to_dense()[0, 0].numpy().astype(bool), tiles(want, 4))
    i = torch.arange(10)
    np.testing.assert_array_equal(bm.mask_mod(0, 0, i[:, None], i[None, :]).numpy(), want)


def test_block_mask_is_one_per_device():
    pattern = P.global_tokens([2]) | P.random_blocks(1, 4, seed=1)
    on_cpu = K.plan(pattern, 10, device="cpu").block_mask(4)
    on_meta = K.plan(pattern, 10, device="meta").block_mask(4)
    assert on_cpu.kv_num_blocks.device.type == "cpu" and on_meta.kv_num_blocks.device.type == "meta"
    assert K.plan(pattern, 10, device=torch.device("meta")).block_mask(4) is on_meta  # held by the plan
    assert devices.block_mask(pattern, 10, "meta", 4) is not on_meta  # the builder keeps nothing


# ---- flex_pattern_attention through flex's eager path ----------------------------------------------------------

N, SCALE = 10, 0.3  # d = 4: the default scale would be 0.5


def window_rule(i, j):
    return -2 <= j - i <= 1  # sliding_window(2, 1)


def np_reference(q, k, v, allow, scale):
    """float64 softmax attention over a (b, n, n) bool mask: out (b, h, n, d_v), lse (b, h, n); rows with no key
    give 0 and −∞."""
    s = scale * np.einsum("bhid,bhjd->bhij", q, k)
    s = np.where(allow[:, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    out = np.einsum("bhij,bhjd->bhid", e / np.where(z > 0, z, 1.0), v)
    lse = np.where(z[..., 0] > 0, np.log(np.where(z[..., 0] > 0, z[..., 0], 1.0)) + m[..., 0], -np.inf)
    return out, lse


def qkv(seed, b=2):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, 2, N, 4, dtype=torch.float64, generator=g) for _ in range(3))


def padded():
    real = torch.ones(2, N, dtype=torch.bool)
    real[0, 7:] = False  # batch 0: three padded keys
    real[1, :] = False  # batch 1: no key at all
    return real


@pytest.fixture
def eager(monkeypatch):
    monkeypatch.setattr(FA, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)


@pytest.mark.parametrize("with_real", [False, True])
@pytest.mark.parametrize("return_lse", [False, True])
def test_pattern_attention_through_eager_hop_equals_float64_softmax(eager, with_real, return_lse):
    pattern = P.sliding_window(2, 1)
    q, k, v = qkv(1)
    real = padded() if with_real else None
    got = devices.flex_pattern_attention(q, k, v, pattern, real, SCALE, compiled=False, return_lse=return_lse,
                                         block=4)
    allow = loop(window_rule, N)[None] & (real.numpy()[:, None, :] if with_real else True)
    want_out, want_lse = np_reference(q.numpy(), k.numpy(), v.numpy(), np.broadcast_to(allow, (2, N, N)), SCALE)
    if return_lse:
        out, lse = got
        np.testing.assert_allclose(lse.numpy(), want_lse, atol=1e-12)
    else:
        out = got
        assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), want_out, atol=1e-12)
    if with_real:
        assert bool((out[1] == 0).all())


def test_pattern_attention_tiles_are_64_on_the_cpu_unless_given(eager):
    pattern = P.causal()
    q, k, v = qkv(2)
    out = devices.flex_pattern_attention(q, k, v, pattern, None, SCALE)
    assert list(K.plan(pattern, N).forms) == [("block_mask", 64)]
    want, _ = np_reference(q.numpy(), k.numpy(), v.numpy(), np.broadcast_to(loop(lambda i, j: j <= i, N), (2, N, N)),
                           SCALE)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-12)
    devices.flex_pattern_attention(q, k, v, pattern, None, SCALE, block=8)
    assert list(K.plan(pattern, N).forms) == [("block_mask", 64), ("block_mask", 8)]


def test_pattern_attention_fuses_only_when_asked_on_the_cpu(eager, monkeypatch):
    asked = []

    def spy(compiled):
        asked.append(compiled)
        return FA.flex_attention  # eager either way here

    monkeypatch.setattr(devices, "_flex_fn", spy)
    q, k, v = qkv(3)
    devices.flex_pattern_attention(q, k, v, P.causal(), None, SCALE, compiled=True)
    devices.flex_pattern_attention(q, k, v, P.causal(), None, SCALE)
    assert [bool(c) for c in asked] == [True, False]


def test_fused_kernel_is_built_once_with_static_shapes(monkeypatch):
    made = []

    def spy(fn=None, **kwargs):
        made.append((fn, kwargs))
        return lambda *a, **kw: fn(*a, **kw)

    monkeypatch.setattr(torch, "compile", spy)
    monkeypatch.setattr(devices, "_COMPILED", {})
    assert devices._flex_fn(False) is FA.flex_attention
    assert made == []
    first = devices._flex_fn(True)
    assert devices._flex_fn(True) is first
    assert made == [(FA.flex_attention, {"dynamic": False})]


def test_cuda_route_without_dropout_runs_the_pattern_kernel(eager, monkeypatch):
    def no_dense(*args):
        raise AssertionError("the dense path ran")

    q, k, v = qkv(4)
    real = padded()
    want, _ = np_reference(q.numpy(), k.numpy(), v.numpy(), loop(window_rule, N)[None] & real.numpy()[:, None, :],
                           SCALE)
    monkeypatch.setattr(devices, "_dense", no_dense)
    out = devices._flex(q, k, v, P.sliding_window(2, 1), real, SCALE, 0.0)
    np.testing.assert_allclose(out.numpy(), want, atol=1e-12)


def test_cuda_route_with_dropout_is_the_cores_masked_dropout():
    q, k, v = qkv(5)
    real = padded()
    pattern = P.sliding_window(2, 1)
    torch.manual_seed(11)
    out = devices._flex(q, k, v, K.plan(pattern, N), real, SCALE, 0.5)
    torch.manual_seed(11)
    mask = torch.from_numpy(loop(window_rule, N))[None, None] & real[:, None, None, :]
    want = attention(q, k, v, mask=mask, scale=SCALE, dropout_p=0.5)[0]
    torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
    plain, _ = np_reference(q.numpy(), k.numpy(), v.numpy(), mask[:, 0].numpy(), SCALE)
    assert not np.allclose(out.numpy(), plain, atol=1e-3)  # some weights were dropped
    assert math.isfinite(float(out.abs().sum()))
