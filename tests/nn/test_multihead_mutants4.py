"""MultiHeadAttention: what the earlier mutation tests left open. ALiBi on top of a given mask (bool,
causal) and under autocast; the cross-attention subclass's causal flag; the separate-projection guard of
``projection_weights``; the module's ``block`` and ``cp_mode`` reaching their kernels; the causal sparse
pattern composed once per module. The reference is a float64 NumPy multi-head attention written here from
Vaswani et al. 2017 §3.2.2 with ALiBi's −m_h·|i − j| (Press et al. 2021), queries at the end of the keys."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from attnlab import patterns as P
from attnlab.nn import CrossAttention, MultiHeadAttention

pytestmark = pytest.mark.usefixtures("one_thread")


def reference(m, xq, xk=None, xv=None, allow=None, causal=False, alibi=False):
    """float64 (out (b, q, dim), weights (b, h, q, k)) with m's weights; allow (b, q, k) bool or None."""
    xk = xq if xk is None else xk
    xv = xk if xv is None else xv
    p = {k: (None if v is None else v.detach().double().numpy()) for k, v in m.projection_weights().items()}
    w_o = m.out_proj.weight.detach().double().numpy()
    b_o = m.out_proj.bias.detach().double().numpy()

    def lin(x, w, b):
        return x @ w.T + (0 if b is None else b)

    q, k, v = lin(xq, p["w_q"], p["b_q"]), lin(xk, p["w_k"], p["b_k"]), lin(xv, p["w_v"], p["b_v"])
    b, nq, nk = q.shape[0], q.shape[1], k.shape[1]
    h, d = m.num_heads, m.head_dim
    slopes = [2.0 ** (-8 * (i + 1) / h) for i in range(h)]  # h a power of two here
    qpos, kpos = np.arange(nq) + (nk - nq), np.arange(nk)
    heads, weights = np.zeros((b, nq, h * d)), np.zeros((b, h, nq, nk))
    for bi in range(b):
        for hi in range(h):
            sl = slice(hi * d, (hi + 1) * d)
            e = q[bi, :, sl] @ k[bi, :, sl].T / math.sqrt(d)
            if alibi:
                e = e - slopes[hi] * np.abs(qpos[:, None] - kpos[None, :])
            ok = np.ones((nq, nk), dtype=bool)
            if allow is not None:
                ok &= allow[bi]
            if causal:
                ok &= kpos[None, :] <= qpos[:, None]
            for i in range(nq):
                if ok[i].any():
                    a = np.where(ok[i], np.exp(e[i] - e[i][ok[i]].max()), 0.0)
                    weights[bi, hi, i] = a / a.sum()
                    heads[bi, i, sl] = weights[bi, hi, i] @ v[bi, :, sl]
    return heads @ w_o.T + b_o, weights


def randomised(m):
    with torch.no_grad():
        for prm in m.parameters():
            prm.normal_(0, 0.5)
    return m.eval()


def close(got, want, atol=1e-10):
    np.testing.assert_allclose(got.detach().double().numpy(), want, atol=atol, rtol=0)


# ---- ALiBi with a mask, and under autocast -------------------------------------------------------------

def test_alibi_bias_is_added_to_a_given_bool_mask():
    """The bias −m_h·|i − j| and the mask both apply: a (b, q, k) mask, and a (b, k) padding mask in cross-attention."""
    torch.manual_seed(40)
    m = randomised(MultiHeadAttention(8, 2, alibi=True).double())
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    allow = torch.tensor([[[True, False, True, True], [False, True, True, False], [True, True, False, True],
                           [True, False, False, True]]]).expand(2, 4, 4).clone()
    allow[1, 0] = torch.tensor([False, False, True, True])
    for causal in (False, True):
        ref, ref_w = reference(m, x.numpy(), allow=allow.numpy(), causal=causal, alibi=True)
        out, w = m(x, mask=allow, causal=causal, need_weights=True)
        close(out, ref)
        close(w, ref_w)
        close(m(x, mask=allow, causal=causal)[0], ref)  # the fused path too
    mem = torch.randn(2, 5, 8, dtype=torch.float64)
    pad = torch.tensor([[True, True, False, True, True], [False, True, True, True, False]])
    ref, ref_w = reference(m, x.numpy(), mem.numpy(), allow=np.broadcast_to(pad.numpy()[:, None, :], (2, 4, 5)), alibi=True)
    out, w = m(x, mem, mask=pad, need_weights=True)
    close(out, ref)
    close(w, ref_w)


def test_alibi_runs_under_autocast_with_the_bias_in_the_scores_dtype():
    """Under CPU autocast the heads are bfloat16; the ALiBi bias follows them (a float32 bias is refused by
    the core), and the result stays within bfloat16's error of the float64 reference."""
    torch.manual_seed(41)
    m = randomised(MultiHeadAttention(8, 2, alibi=True))
    x = torch.randn(2, 5, 8)
    pad = torch.tensor([[True] * 5, [True, True, True, False, True]])
    allow = np.broadcast_to(pad.numpy()[:, None, :], (2, 5, 5))
    for mask, ok in ((None, None), (pad[:, None, None, :].expand(2, 1, 5, 5), allow)):
        ref, ref_w = reference(m, x.double().numpy(), allow=ok, alibi=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for need in (False, True):
                out, w = m(x, mask=mask, need_weights=need)
                assert out.dtype == torch.bfloat16
                close(out, ref, atol=0.03 * np.abs(ref).max())  # bfloat16: 8 bits; leaving ALiBi out errs by 6 %
                if need:
                    close(w, ref_w, atol=0.025)  # (ALiBi left out: 0.05)


# ---- CrossAttention passes causal -----------------------------------------------------------------------

def test_cross_attention_subclass_passes_causal():
    """Three queries at the end of five keys: query i may attend keys 0 … i + 2 (bottom-right)."""
    torch.manual_seed(42)
    m = randomised(CrossAttention(8, 2, kdim=3, vdim=5).double())
    q = torch.randn(1, 3, 8, dtype=torch.float64)
    ctx, val = torch.randn(1, 5, 3, dtype=torch.float64), torch.randn(1, 5, 5, dtype=torch.float64)
    ref, ref_w = reference(m, q.numpy(), ctx.numpy(), val.numpy(), causal=True)
    assert ref_w[0, :, 0, 3:].max() == 0 and ref_w[0, :, 0, 3].max() == 0
    out, w = m(q, ctx, val, causal=True, need_weights=True)
    close(out, ref)
    close(w, ref_w)
    close(m(q, ctx, val, causal=True)[0], ref)
    ref_full, _ = reference(m, q.numpy(), ctx.numpy(), val.numpy())
    assert np.abs(ref_full - ref).max() > 1e-3  # causal changes these outputs


# ---- projection_weights' guard ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["q_proj_weight", "k_proj_weight", "v_proj_weight"])
def test_projection_weights_refuses_a_separate_weight_set_to_none(name):
    """kdim ≠ dim: three separate weights; with one of them removed by hand there is no W to return."""
    m = MultiHeadAttention(8, 2, kdim=3)
    setattr(m, name, None)
    with pytest.raises(AssertionError):
        m.projection_weights()


# ---- the sparse module's block, its causal pattern ----------------------------------------------------------

def test_sparse_module_hands_its_block_to_the_kernel():
    m = MultiHeadAttention(8, 2, pattern=P.sliding_window(1), block=0)
    with pytest.raises(ValueError, match="^" + re.escape("block must be a positive integer; got 0") + "$"):
        m(torch.randn(1, 6, 8))


def test_causal_sparse_pattern_is_composed_once_per_module():
    """pattern & causal is built on the first causal call and reused (the kernel's plans are cached per pattern)."""
    m = MultiHeadAttention(8, 2, pattern=P.sliding_window(1), block=4).eval()
    x = torch.randn(1, 6, 8)
    m(x, causal=True)
    first = m._causal_pattern
    m(x, causal=True)
    m(x)
    assert m._causal_pattern is first
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    assert torch.equal(first.allows(i, j, 6), ((i - j).abs() <= 1) & (j <= i))


# ---- context parallelism: the mode reaches the kernel -------------------------------------------------------

@pytest.fixture
def one_process_group(tmp_path):
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_context_parallel_hands_its_mode_to_the_kernel(one_process_group):
    m = MultiHeadAttention(8, 2, context_parallel=True, cp_mode="tree")
    with pytest.raises(ValueError, match="^" + re.escape("mode must be one of ['ring', 'ulysses']; got 'tree'") + "$"):
        m(torch.randn(1, 4, 8))
