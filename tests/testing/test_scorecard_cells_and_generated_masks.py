"""The scorecard's table (its columns, rows, cells and the half-precision column, a peer left out when
its package is missing) and each wrapper's attention against NumPy; the masks and plants of generated
inputs (attnlab.testing.generate.build): each mask kind's shape and values drawn after q, k, v from
the spec's seed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.testing import scorecard as S
from attnlab.testing.generate import MASKS, PLANTS, Spec, build
from attnlab.testing.report import Failure, Report

F64 = torch.float64


def np_attention(q, k, v, allow):
    """float64 NumPy softmax attention, allow (b, h, q, k) True = may attend (no fully masked rows)."""
    q, k, v = (t.detach().double().numpy() for t in (q, k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    s = np.where(allow, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", w / w.sum(-1, keepdims=True), v)


def _qkv(b=1, h=2, n=3, m=4, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, length, d, generator=g) for length in (n, m, m))


ALLOW = torch.tensor(
    [[True, False, True, True], [False, True, True, False], [True, True, False, True]]
)


def _out(result):
    out = result[0] if isinstance(result, (tuple, list)) else result
    return out.detach().double().numpy()


def _close(got, want):
    np.testing.assert_allclose(_out(got), want, rtol=1e-5, atol=1e-6)


def test_the_columns_and_the_rows_of_the_scorecard():
    assert S.COLUMNS == [
        "values",
        "deterministic",
        "broadcast mask (q, k)",
        "non-contiguous inputs",
        "masked NaN value",
        "masked inf key",
        "fully masked row",
        "mask polarity",
        "causal",
        "causal alignment (q < k)",
        "causal alignment (q > k)",
        "local window",
        "random row masks",
        "empty",
    ]
    assert S.HALF == (torch.float16, torch.bfloat16)
    assert [(r[0], r[2], r[3], r[4]) for r in S.ROWS] == [
        ("textbook: masked_fill(-inf), softmax, @ v", "qkv_mask", "torch", {}),
        ("torch `scaled_dot_product_attention` (bool mask)", "qkv_mask", "torch", {}),
        ("torch `scaled_dot_product_attention` (is_causal)", "qkv_causal", "torch", {}),
        ("torch `nn.MultiheadAttention` (identity projections)", "qkv_torch_mask", "torch", {}),
        (
            "torch `flex_attention` (eager, score_mod mask; outputs only: no backward on CPU)",
            "qkv_mask",
            "torch",
            {"grad": False},
        ),
        ("transformers Llama `eager_attention_forward`", "qkv_bias", "transformers", {}),
        ("attnlab `attention`", "qkv_mask", "attnlab", {}),
        (
            "attnlab `attention` (causal=, bottom-right aligned)",
            "qkv_causal",
            "attnlab",
            {"causal": "bottom_right"},
        ),
    ]


def test_the_mask_wrappers_are_masked_softmax_attention():
    q, k, v = _qkv()
    want = np_attention(q, k, v, np.broadcast_to(ALLOW.numpy(), (1, 2, 3, 4)))
    for fn in (S.textbook, S.sdpa, S.attnlab_attention, S.ROWS[0][1], S.ROWS[6][1]):
        _close(fn(q, k, v, ALLOW), want)


def test_the_is_causal_row_of_sdpa_is_top_left_causal_attention():
    q, k, v = _qkv(n=2, m=3)
    top_left = np.arange(3)[None, :] <= np.arange(2)[:, None]
    _close(
        S.ROWS[2][1](q, k, v, True), np_attention(q, k, v, np.broadcast_to(top_left, (1, 2, 2, 3)))
    )
    _close(S.ROWS[2][1](q, k, v, False), np_attention(q, k, v, np.ones((1, 2, 2, 3), dtype=bool)))


def test_the_score_mod_row_masks_each_batch_head_query_and_key():
    pytest.importorskip("torch.nn.attention.flex_attention")
    b, h, n, m, d = 3, 2, 4, 3, 2  # every size different, so that no axis can stand for another
    q, k, v = _qkv(b=b, h=h, n=n, m=m, d=d)
    allow = torch.rand(b, h, n, m, generator=torch.Generator().manual_seed(1)) < 0.6
    allow[..., 0] = True
    allow[2, 1, 3] = torch.tensor([False, False, True])
    _close(S.flex(q, k, v, allow), np_attention(q, k, v, allow.numpy()))


def test_the_multihead_row_in_float64_with_more_batch_elements_than_heads():
    b, h, n, m, d = 3, 2, 2, 4, 1
    q, k, v = (t.double() for t in _qkv(b=b, h=h, n=n, m=m, d=d))
    forbid = torch.zeros(b, h, n, m, dtype=torch.bool)  # True = masked out
    forbid[2, 1, 0, :3] = forbid[0, 0, 1, 1] = True
    out = S.multihead(q, k, v, forbid)
    assert out.dtype == F64 and out.shape == (b, h, n, d)
    np.testing.assert_allclose(
        _out(out), np_attention(q, k, v, ~forbid.numpy()), rtol=1e-12, atol=1e-12
    )


def test_the_llama_row_takes_an_additive_mask_clamped_to_the_lowest_float():
    pytest.importorskip("transformers")
    q, k, v = _qkv()
    bias = torch.zeros(3, 4).masked_fill(~ALLOW, -torch.inf)
    _close(
        S.transformers_eager(q, k, v, bias),
        np_attention(q, k, v, np.broadcast_to(ALLOW.numpy(), (1, 2, 3, 4))),
    )
    row = S.transformers_eager(
        q, k, v, torch.full((3, 4), -torch.inf)
    )  # every key forbidden: uniform, not NaN
    np.testing.assert_allclose(
        _out(row), np.broadcast_to(v.mean(-2, keepdim=True).numpy(), (1, 2, 3, 2)), rtol=1e-5
    )


def _failure(case, rule):
    return Failure(case, rule, rule, {}, "qkv_mask", "mask")


def test_a_cell_is_a_tick_the_rules_broken_or_not_applicable():
    r = Report("f", "qkv_mask")
    r.failures = [
        _failure("values [float32, cpu]", "differs from the reference"),
        _failure("values [float32, cpu]", "differs from the reference"),
        _failure("causal [float32, cpu]", "a NaN in a future key reached an earlier row"),
        _failure("causal [float32, cpu]", "raised KeyError"),
        _failure("mask polarity [float16, cpu]", "mask polarity looks inverted"),
        _failure("empty batch (b = 0) [float32, cpu]", "raised IndexError"),
        _failure("empty queries (q = 0) [float32, cpu]", "the output has the wrong shape"),
    ]
    r.skipped = ["deterministic [float32, cpu]", "empty keys (k = 0) [float32, cpu]"]
    f32 = (torch.float32,)
    assert S._cell(r, "values", f32) == "✗ differs from the reference"
    assert (
        S._cell(r, "causal", f32)
        == "✗ a NaN in a future key reached an earlier row; raised KeyError"
    )
    assert S._cell(r, "mask polarity", f32) == "✓"  # only float16 broke it
    assert S._cell(r, "mask polarity", (torch.float16,)) == "✗ mask polarity looks inverted"
    assert S._cell(r, "deterministic", f32) == "n/a"
    assert S._cell(r, "fully masked row", f32) == "✓"
    assert S._cell(r, "empty", f32) == (
        "✗ empty batch (b = 0): raised IndexError; "
        "empty queries (q = 0): the output has the wrong shape"
    )
    r.failures = []
    assert S._cell(r, "empty", f32) == "✓"  # one of the three was skipped, not all
    r.skipped = [
        f"{c} [float32, cpu]"
        for c in ("empty keys (k = 0)", "empty batch (b = 0)", "empty queries (q = 0)")
    ]
    assert S._cell(r, "empty", f32) == "n/a"


def test_the_half_column_names_only_what_half_precision_adds():
    r = Report("f", "qkv_mask")
    r.failures = [
        _failure("values [float32, cpu]", "differs from the reference"),
        _failure("values [float16, cpu]", "differs from the reference"),
        _failure("causal [bfloat16, cpu]", "raised RuntimeError"),
        _failure("causal [float16, cpu]", "raised RuntimeError"),
        _failure("mask polarity [float16, cpu]", "mask polarity looks inverted"),
    ]
    assert S._half(r) == "✗ raised RuntimeError; mask polarity looks inverted"
    r.failures = r.failures[:2]
    assert S._half(r) == "✓"


def test_a_peer_that_is_not_installed_is_left_out_with_a_line(capsys):
    rows = [("nobody's attention", S.textbook, "qkv_mask", "attnlab_no_such_package", {})]
    assert S.scorecard(rows) == (
        "| implementation | signature | "
        + " | ".join(S.COLUMNS)
        + " | float16, bfloat16 |\n"
        + "|---|"
        + "---|" * (len(S.COLUMNS) + 2)
    )
    assert (
        capsys.readouterr().err
        == "nobody's attention: attnlab_no_such_package is not installed, left out\n"
    )
    assert S.scorecard(rows, half=False).splitlines() == [
        "| implementation | signature | " + " | ".join(S.COLUMNS) + " |",
        "|---|" + "---|" * len(S.COLUMNS) + "---|",
    ]
    assert S._version("torch") == f"torch {torch.__version__}"
    assert S._version("attnlab_no_such_package") == ""


def test_a_row_reads_name_version_signature_and_one_cell_per_column():
    rows = [
        (
            "attnlab, declared as torch's polarity",
            S.attnlab_attention,
            "qkv_torch_mask",
            "torch",
            {"grad": False},
        )
    ]
    (_, _, line) = S.scorecard(rows, half=False).splitlines()
    cells = line.split(" | ")
    assert cells[0] == f"| attnlab, declared as torch's polarity (torch {torch.__version__})"
    assert cells[1] == "`qkv_torch_mask`"
    assert "✗ mask polarity looks inverted" in cells
    assert cells[-1] == "✓ |" and len(cells) == len(S.COLUMNS) + 2


def test_the_mask_kinds_and_plants():
    assert MASKS == ("none", "key padding", "broadcast (q, k)", "random", "fully masked rows")
    assert PLANTS == (None, "masked NaN value", "masked inf key")


@pytest.mark.parametrize(
    ("mask", "shape"),
    [
        ("key padding", (2, 1, 1, 5)),
        ("broadcast (q, k)", (3, 5)),
        ("random", (2, 2, 3, 5)),
        ("fully masked rows", (2, 2, 3, 5)),
    ],
)
def test_a_generated_mask_is_drawn_after_q_k_v_in_the_shape_of_its_kind(mask, shape):
    name, s = build(Spec(b=2, h=2, q=3, k=5, d=2, mask=mask, plant=None, seed=11))
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, 2, n, 2, generator=g, dtype=F64) for n in (3, 5, 5))
    allow = torch.rand(shape, generator=g) < 0.7
    if mask == "fully masked rows":
        assert allow[..., 0, :].any()  # the draw allowed some: the case forbids them
        allow[..., 0, :] = False
    assert name == "values"
    assert all(torch.equal(a, b) for a, b in zip((s.q, s.k, s.v), (q, k, v)))
    assert s.q.dtype == F64 and s.allow.dtype == torch.bool
    assert torch.equal(s.allow, allow)
    assert (s.causal, s.strided) == (False, False)


def test_no_mask_is_all_true_over_the_keys_and_no_queries_take_no_row_mask():
    _, s = build(Spec(b=2, h=1, q=2, k=3, d=1, mask="none", plant=None, seed=0))
    assert s.allow.shape == (1, 1, 1, 3) and s.allow.dtype == torch.bool and s.allow.all()
    _, s = build(Spec(b=1, h=2, q=0, k=3, d=1, mask="fully masked rows", plant=None, seed=0))
    assert s.allow.shape == (1, 2, 0, 3)


def test_plants_go_only_to_keys_that_no_query_of_that_head_may_attend():
    spec = dict(b=1, h=2, q=3, k=4, d=1, mask="random", seed=5)
    _, clean = build(Spec(**spec, plant=None))
    name, s = build(Spec(**spec, plant="masked NaN value"))
    unattended = ~clean.allow.any(-2)  # (b, h, k)
    assert unattended.any() and (~unattended).any()
    assert name == "masked NaN value"
    assert torch.equal(torch.isnan(s.v).all(-1), unattended) and torch.equal(s.k, clean.k)
    name, s = build(Spec(**spec, plant="masked inf key"))
    assert name == "masked inf key"
    assert torch.equal((s.k == torch.inf).all(-1), unattended) and torch.equal(s.v, clean.v)
    assert torch.equal(s.k[~unattended], clean.k[~unattended])


def test_the_half_column_keys_each_case_by_its_whole_name():
    r = Report("f", "qkv_mask")
    r.failures = [
        _failure("causal alignment (q < k) [float32, cpu]", "raised RuntimeError"),
        _failure("causal [float16, cpu]", "raised RuntimeError"),
    ]
    assert S._half(r) == "✗ raised RuntimeError"  # "causal" is not "causal alignment (q < k)"
    r.failures = [
        _failure("causal [float32, cpu]", "raised RuntimeError"),
        _failure("causal alignment (q < k) [float16, cpu]", "raised RuntimeError"),
    ]
    assert S._half(r) == "✗ raised RuntimeError"
    r.failures = [
        _failure("values [float32, cpu]", "differs from the reference"),
        _failure("values [float32, cpu]", "raised KeyError"),  # two rules of one float32 case
        _failure("values [bfloat16, cpu]", "rule: with a colon"),
    ]
    assert S._half(r) == "✗ rule: with a colon"


def test_rows_after_a_missing_peer_run_with_their_options_and_half_precision(capsys):
    import attnlab

    def off_in_float16(q, k, v, mask):  # detached (grad=False declared); 1 % off in float16 only
        out = attnlab.attention(q, k, v, mask=mask)[0].detach()
        return out * 1.01 if q.dtype == torch.float16 else out

    rows = [
        ("missing", S.textbook, "qkv_mask", "attnlab_no_such_package", {}),
        ("off in float16", off_in_float16, "qkv_mask", "attnlab", {"grad": False}),
    ]
    (_, _, line) = S.scorecard(rows).splitlines()
    assert line == (
        f"| off in float16 (attnlab {attnlab.__version__}) | `qkv_mask` | "
        + "✓ | " * len(S.COLUMNS)
        + "✗ differs from the reference |"
    )
    assert (
        capsys.readouterr().err == "missing: attnlab_no_such_package is not installed, left out\n"
    )
