"""``attnlab.attention``: messages with batch dimensions, the CPU's look-ahead, the non-finite rule's
gradients (a NaN query row, a NaN key where the mask forbids, a NaN query in a fully masked row), the meta device with the causal mask, and ``weigh``'s ``inplace``.

Every value is compared with a float64 reference written here (softmax(q kᵀ/√d masked) v, with the
offending row or key dropped), computed by autograd for the gradients.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

import attnlab

core = importlib.import_module("attnlab.functional.attention")  # the module (the package exports the function)


def _reference(q, k, v, allow):
    """float64 softmax(q kᵀ/√d, −∞ where ``allow`` is False) v; a row that may attend nothing is zero."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allow, float("-inf"))
    dead = ~allow.any(-1, keepdim=True)
    w = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v, w


def _leaves(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]


# ---- messages -------------------------------------------------------------------------------------------


def test_length_mismatch_message_reads_k_from_the_second_to_last_axis_with_a_batch_axis():
    q, k, v = _leaves((2, 3, 4), (2, 3, 4), (2, 5, 4))  # value.shape[2] = 4, its k = 5
    with pytest.raises(ValueError) as info:
        attnlab.attention(q, k, v)
    assert str(info.value) == (
        "key and value must have the same length k: key (2, 3, 4) has k=3, value (2, 5, 4) has k=5"
    )


def test_an_unknown_score_name_is_reported_before_any_feature_size_check():
    q, k, v = _leaves((1, 3, 4), (1, 3, 5), (1, 3, 2))  # sizes differ: only the dot scores need them equal
    with pytest.raises(ValueError, match=r"^score must be 'dot', 'scaled_dot' or a callable .*got 'general'"):
        attnlab.attention(q, k, v, score="general")


# ---- the CPU's look-ahead (_host_checks) ------------------------------------------------------------------


def test_host_checks_is_true_for_an_eager_cpu_tensor_only(monkeypatch):
    assert core._host_checks(torch.zeros(2)) is True
    assert core._host_checks(torch.zeros(2, device="meta")) is False
    monkeypatch.setattr(core._checks, "tracing", lambda: True)  # as under torch.compile / export
    assert core._host_checks(torch.zeros(2)) is False


def _count_guard(monkeypatch):
    calls = []
    for name in ("_guard", "_guard_device"):  # the CPU's guard after a look, the branch-free one elsewhere
        real = getattr(core, name)

        def spy(*args, real=real, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(core, name, spy)
    return calls


def test_finite_cpu_inputs_skip_the_guard_and_a_nan_or_the_branch_free_path_runs_it(monkeypatch):
    q, k, v = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2))
    allow = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    want, _ = _reference(q, k, v, allow)
    calls = _count_guard(monkeypatch)
    out, _ = attnlab.attention(q, k, v, mask=allow)
    assert calls == []  # finite inputs, looked at on the CPU: no copies
    torch.testing.assert_close(out, want)
    v_nan = v.clone()
    v_nan[0, 3, 0] = float("nan")  # forbidden to every row but the last
    out, _ = attnlab.attention(q, k, v_nan, mask=allow)
    assert calls == [1]
    torch.testing.assert_close(out[:, :2], want[:, :2])
    assert out[:, 2].isnan().all()
    monkeypatch.setattr(core, "_host_checks", lambda t: False)  # as on a GPU: no look-ahead
    out, _ = attnlab.attention(q, k, v, mask=allow)
    assert calls == [1, 1]
    torch.testing.assert_close(out, want)


# ---- the non-finite rule's gradients ----------------------------------------------------------------------


@pytest.mark.parametrize("kv_finite", [False, True])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_query_row_is_nan_and_reaches_no_other_rows_gradient(kv_finite, need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=1)
    allow = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    q = q0.clone()
    q[0, 1, 2] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q, k0.clone(), v0.clone()))
    out, _ = attnlab.attention(q, k, v, mask=allow, kv_finite=kv_finite, need_weights=need_weights)
    assert out[0, 1].isnan().all()
    keep = [0, 2]  # the finite rows: the reference leaves the NaN row out
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0[:, keep], k0, v0))
    want, _ = _reference(rq, rk, rv, allow[keep])
    torch.testing.assert_close(out[:, keep], want)
    g = torch.linspace(-1, 1, want.numel(), dtype=torch.float64).view(want.shape)
    (out[:, keep] * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(k.grad, rk.grad)
    torch.testing.assert_close(v.grad, rv.grad)
    torch.testing.assert_close(q.grad[:, keep], rq.grad)
    assert (q.grad[:, 1] == 0).all()


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_key_where_the_mask_forbids_changes_no_output_and_no_gradient(need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=2)
    pad = torch.tensor([True, False, True, True])  # key 1 is padding for every query
    k = k0.clone()
    k[0, 1] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q0.clone(), k, v0.clone()))
    out, w = attnlab.attention(q, k, v, mask=pad.view(1, 1, 4), need_weights=need_weights)
    keep = [0, 2, 3]
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0, k0[:, keep], v0[:, keep]))
    want, want_w = _reference(rq, rk, rv, torch.ones(3, 3, dtype=torch.bool))
    torch.testing.assert_close(out, want)
    if need_weights:
        torch.testing.assert_close(w[..., keep], want_w)
        assert (w[..., 1] == 0).all()
    g = torch.linspace(-1, 1, want.numel(), dtype=torch.float64).view(want.shape)
    (out * g).sum().backward()
    (want * g).sum().backward()
    torch.testing.assert_close(q.grad, rq.grad)
    torch.testing.assert_close(k.grad[:, keep], rk.grad)
    torch.testing.assert_close(v.grad[:, keep], rv.grad)
    assert (k.grad[:, 1] == 0).all() and (v.grad[:, 1] == 0).all()


@pytest.mark.parametrize("kv_finite", [False, True])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
def test_a_nan_query_in_a_fully_masked_row_gives_a_zero_row_and_zero_gradients(kv_finite, need_weights):
    q0, k0, v0 = _leaves((1, 3, 4), (1, 4, 4), (1, 4, 2), seed=3)
    allow = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.bool)
    q = q0.clone()
    q[0, 1, 0] = float("nan")  # the row that may attend nothing
    q, k, v = (t.requires_grad_() for t in (q, k0.clone(), v0.clone()))
    out, w = attnlab.attention(q, k, v, mask=allow, kv_finite=kv_finite, need_weights=need_weights)
    assert (out[0, 1] == 0).all()  # a fully masked row is zero regardless
    keep = [0, 2]
    rq, rk, rv = (t.clone().requires_grad_() for t in (q0[:, keep], k0, v0))
    want, want_w = _reference(rq, rk, rv, allow[keep])
    torch.testing.assert_close(out[:, keep], want)
    if need_weights:
        torch.testing.assert_close(w[:, keep], want_w)
        assert (w[:, 1] == 0).all()
    g = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)
    (out * g).sum().backward()
    (want * g[:, keep]).sum().backward()
    torch.testing.assert_close(k.grad, rk.grad)
    torch.testing.assert_close(v.grad, rv.grad)
    torch.testing.assert_close(q.grad[:, keep], rq.grad)
    assert (q.grad[:, 1] == 0).all()


# ---- the meta device --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "q_len, with_mask, need_weights",
    [(3, True, False), (3, False, False), (4, True, True), (4, False, True), (3, True, True)],
)
def test_causal_attention_on_the_meta_device_builds_its_mask_there(q_len, with_mask, need_weights):
    q = torch.empty(2, q_len, 4, device="meta")
    k, v = torch.empty(2, 4, 4, device="meta"), torch.empty(2, 4, 3, device="meta")
    mask = torch.ones(2, 1, 4, dtype=torch.bool, device="meta") if with_mask else None
    out, w = attnlab.attention(q, k, v, mask=mask, causal=True, need_weights=need_weights)
    assert out.device.type == "meta" and out.shape == (2, q_len, 3)
    if need_weights:
        assert w.device.type == "meta" and w.shape == (2, q_len, 4)


# ---- weigh ------------------------------------------------------------------------------------------------


def test_weigh_leaves_its_scores_untouched_by_default():
    e = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    before = e.clone()
    w = core.weigh(e, torch.tensor([[True, True, False], [True, True, True]]))
    assert torch.equal(e, before)
    want = torch.exp(before.double()) * torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(w.double(), want / want.sum(-1, keepdim=True))


def test_weigh_in_place_writes_the_weights_into_the_scores_storage():
    e = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    want = torch.softmax(e.double(), -1)
    with torch.no_grad():
        w = core.weigh(e, None, inplace=True)
    assert w.data_ptr() == e.data_ptr()  # no (q, k) allocation
    torch.testing.assert_close(w.double(), want)


# ---- no keys ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("need_weights", [False, True], ids=["fast", "reference"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_with_no_keys_every_row_is_zero_a_non_finite_querys_too(need_weights, bad):
    q = torch.randn(2, 3, 4, dtype=torch.float64)
    q[0, 1, 0] = bad  # no mask: nothing to guard, and c_i = Σ_j α_ij v_j over no j is 0
    q.requires_grad_()
    k = torch.randn(2, 0, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 0, 5, dtype=torch.float64, requires_grad=True)
    out, w = attnlab.attention(q, k, v, need_weights=need_weights)
    assert out.shape == (2, 3, 5) and (out == 0).all()
    if need_weights:
        assert w.shape == (2, 3, 0)
    out.sum().backward()
    assert (q.grad == 0).all()
