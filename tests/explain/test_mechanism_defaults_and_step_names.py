"""Each mechanism kind run on a tiny example without its optional parameters: the defaults
(values = keys, scale 1/√d or 1/√d_head, identity projections, one head, score "dot",
dilation 1, combine "or") and the names and shapes of its steps, against float64 NumPy here."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.explain.examples import parse
from attnlab.explain.mechanisms import (
    display_value,
    head_axis,
    neighborhood_mask,
    num_heads,
    run,
    single_query,
)

Q = np.array([[1.0, 0.0], [0.0, 1.0]])
K = np.array([[1.0, 2.0], [0.5, -1.0], [0.0, 1.0]])
QK = "query = [[1.0, 0.0], [0.0, 1.0]]\nkeys = [[1.0, 2.0], [0.5, -1.0], [0.0, 1.0]]\n"


def _ex(mech: str, body: str):
    return parse(f'mechanism = "{mech}"\n[inputs]\n' + body)


def _softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _names(t):
    return [s.name for s in t.steps]


def _shown(ex, t, name):
    return display_value(ex, name, t[name].value).numpy()


def test_dot_has_no_scaling_and_its_values_default_to_the_keys():
    ex = _ex("dot", QK)
    t = run(ex)
    assert _names(t) == ["scores", "weights", "context"]
    s = Q @ K.T
    np.testing.assert_allclose(_shown(ex, t, "scores"), s, atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "weights"), _softmax(s), atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "context"), _softmax(s) @ K, atol=1e-12)


def test_scaled_dot_divides_by_the_square_root_of_d_by_default():
    ex = _ex("scaled-dot", QK)
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "weights", "context"]
    e = Q @ K.T / np.sqrt(2.0)
    np.testing.assert_allclose(_shown(ex, t, "scaled_scores"), e, atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "context"), _softmax(e) @ K, atol=1e-12)


def test_masked_uses_the_scaled_dot_score_by_default_and_hides_zeros():
    ex = _ex("masked", QK + "mask = [[1, 0, 1], [1, 1, 0]]\n")
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "masked_scores", "weights", "context"]
    e = Q @ K.T / np.sqrt(2.0)
    m = np.array([[1, 0, 1], [1, 1, 0]], bool)
    w = _softmax(np.where(m, e, -np.inf))
    np.testing.assert_allclose(_shown(ex, t, "weights"), w, atol=1e-12)
    assert _shown(ex, t, "weights")[0, 1] == 0.0 and _shown(ex, t, "weights")[1, 2] == 0.0


def test_masked_without_a_mask_is_refused():
    with pytest.raises(
        ValueError, match=r"mechanism 'masked' needs a mask \(or \[params\] causal = true\)"
    ):
        run(_ex("masked", QK))


def test_linear_uses_elu_plus_one_and_normalises_the_similarities():
    ex = _ex("linear", QK)
    t = run(ex)
    assert _names(t) == ["query_features", "key_features", "similarities", "weights", "context"]

    def phi(x):
        return np.where(x > 0, x + 1.0, np.exp(x))

    sim = phi(Q) @ phi(K).T
    np.testing.assert_allclose(_shown(ex, t, "key_features"), phi(K), atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "similarities"), sim, atol=1e-12)
    w = sim / sim.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(_shown(ex, t, "weights"), w, atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "context"), w @ K, atol=1e-12)


def test_softcap_caps_the_scaled_scores():
    ex = _ex("softcap", QK + "[params]\ncap = 2\n")
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "softcapped_scores", "weights", "context"]
    e = Q @ K.T / np.sqrt(2.0)
    np.testing.assert_allclose(
        _shown(ex, t, "softcapped_scores"), 2.0 * np.tanh(e / 2.0), atol=1e-12
    )


@pytest.mark.parametrize("cap", ["true", '"2"', None])
def test_softcap_without_a_numeric_cap_is_refused(cap):
    body = QK + (f"[params]\ncap = {cap}\n" if cap else "")
    got = "True" if cap == "true" else ("'2'" if cap else "None")
    with pytest.raises(
        ValueError, match=rf"mechanism 'softcap' needs cap \(a positive number\); got {got}$"
    ):
        run(_ex("softcap", body))


def test_self_attention_without_weights_uses_identities_and_shows_one_head():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    ex = _ex("self-attention", "x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]\n")
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "weights", "context"]
    assert tuple(t["scores"].value.shape) == (1, 1, 3, 3)
    e = x @ x.T / np.sqrt(2.0)
    np.testing.assert_allclose(_shown(ex, t, "scaled_scores"), e, atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "context"), _softmax(e) @ x, atol=1e-12)
    assert not head_axis(ex, "weights")


def test_multi_head_splits_x_into_heads_scaled_by_the_head_size():
    x = np.array([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    ex = _ex(
        "multi-head", "x = [[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0]]\n[params]\nnum_heads = 2\n"
    )
    t = run(ex)
    assert _names(t) == [
        "query_heads",
        "key_heads",
        "value_heads",
        "scores",
        "scaled_scores",
        "weights",
        "context",
        "heads",
    ]
    assert [t[n].formula for n in ("query_heads", "key_heads", "value_heads")] == [
        "split Q into 2 heads of 2",
        "split K into 2 heads of 2",
        "split V into 2 heads of 2",
    ]
    assert t["query_heads"].latex == r"Q_1, \dots, Q_{2}"
    heads = [x[:, :2], x[:, 2:]]
    ctx = []
    for h, xh in enumerate(heads):
        e = xh @ xh.T / np.sqrt(2.0)
        np.testing.assert_allclose(_shown(ex, t, "scaled_scores")[h], e, atol=1e-12)
        ctx.append(_softmax(e) @ xh)
    np.testing.assert_allclose(_shown(ex, t, "heads"), np.concatenate(ctx, axis=1), atol=1e-12)
    assert head_axis(ex, "weights") and not head_axis(ex, "heads")
    assert num_heads(ex) == 2


def test_given_projections_and_w_o_are_shown_and_absent_ones_are_not():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    wq, wo = np.array([[1.0, 2.0], [0.0, 1.0]]), np.array([[1.0, 0.0], [1.0, 1.0]])
    ex = _ex(
        "multi-head",
        "x = [[1.0, 0.0], [0.0, 1.0]]\n[params]\nnum_heads = 1\n"
        "w_q = [[1.0, 2.0], [0.0, 1.0]]\nw_o = [[1.0, 0.0], [1.0, 1.0]]\n",
    )
    t = run(ex)
    assert _names(t) == [
        "projected_query",
        "scores",
        "scaled_scores",
        "weights",
        "context",
        "output",
    ]
    q = x @ wq.T
    np.testing.assert_allclose(_shown(ex, t, "projected_query"), q, atol=1e-12)
    ctx = _softmax(q @ x.T / np.sqrt(2.0)) @ x
    np.testing.assert_allclose(_shown(ex, t, "output"), ctx @ wo.T, atol=1e-12)


def test_gqa_shows_key_and_value_heads_before_and_after_sharing():
    ex = _ex(
        "gqa",
        "x = [[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0]]\n[params]\nnum_heads = 2\nnum_kv_heads = 1\n"
        "w_k = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]\nw_v = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]\n",
    )
    t = run(ex)
    assert _names(t)[:7] == [
        "projected_keys",
        "projected_values",
        "query_heads",
        "key_heads",
        "value_heads",
        "key_groups",
        "value_groups",
    ]
    assert t["key_heads"].formula == "split K into 1 heads of 2"
    assert t["key_groups"].formula == "K head ⌈i·1/2⌉ for query head i"
    assert t["value_groups"].latex == r"V_{\lceil i h_{kv} / h \rceil}"
    assert tuple(t["key_groups"].value.shape) == (1, 2, 2, 2)
    np.testing.assert_allclose(
        t["key_groups"].value[0, 1].numpy(), [[1.0, 0.0], [0.0, 1.0]], atol=1e-12
    )


def test_gqa_needs_kv_heads_that_divide_the_heads():
    ex = _ex("gqa", "x = [[1.0, 0.0, 2.0]]\n[params]\nnum_heads = 3\nnum_kv_heads = 2\n")
    with pytest.raises(ValueError, match=r"num_kv_heads.*must divide num_heads=3; got 2$"):
        run(ex)


def test_cross_has_one_head_by_default():
    ex = _ex("cross", QK)
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "weights", "context"]
    assert tuple(t["weights"].value.shape) == (1, 1, 2, 3)
    e = Q @ K.T / np.sqrt(2.0)
    np.testing.assert_allclose(_shown(ex, t, "weights"), _softmax(e), atol=1e-12)
    assert num_heads(ex) == 1


def test_sparse_turns_a_named_pattern_into_the_mask():
    ex = _ex(
        "sparse",
        "query = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]\n" + QK.split("\n")[1] + "\n"
        '[params]\npattern = {name = "sliding_window", before = 1, after = 0}\n',
    )
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "masked_scores", "weights", "context"]
    assert ex.inputs["mask"] == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    m = np.array(ex.inputs["mask"], bool)
    np.testing.assert_allclose(
        _shown(ex, t, "weights"), _softmax(np.where(m, q @ K.T / np.sqrt(2.0), -np.inf)), atol=1e-12
    )


def test_sparse_pattern_lists_are_joined_with_or_by_default():
    body = "query = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]\n" + QK.split("\n")[1] + "\n[params]\n"
    pat = 'pattern = [{kind = "sliding_window", args = [0, 0]}, {kind = "global_tokens", args = [[0]]}]\n'
    ex = _ex("sparse", body + pat)
    run(ex)
    either = ex.inputs["mask"]
    ex2 = _ex("sparse", body + pat + 'combine = "and"\n')
    run(ex2)
    # diagonal OR (row 0 / column 0) vs diagonal AND (row 0 / column 0)
    assert either == [[1, 1, 1], [1, 1, 0], [1, 0, 1]]
    assert ex2.inputs["mask"] == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]


def test_attentional_uses_the_dot_score_by_default_and_tanh_of_w_c():
    wc = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    ex = _ex("attentional", QK + "[params]\nw_c = [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]]\n")
    t = run(ex)
    assert _names(t) == [
        "scores",
        "weights",
        "context",
        "context_state",
        "output_preactivation",
        "output",
    ]
    c = _softmax(Q @ K.T) @ K
    cs = np.concatenate([c, Q], axis=1)
    np.testing.assert_allclose(_shown(ex, t, "context_state"), cs, atol=1e-12)
    np.testing.assert_allclose(_shown(ex, t, "output"), np.tanh(cs @ wc.T), atol=1e-12)


def test_an_unknown_score_lists_the_known_ones():
    ex = _ex("attentional", QK + '[params]\nscore = "cosine"\nw_c = [[1.0, 0.0, 0.0, 1.0]]\n')
    with pytest.raises(
        ValueError,
        match=r"unknown score 'cosine'; known: dot, scaled_dot, general, additive, concat$",
    ):
        run(ex)


def test_neighborhood_dilation_defaults_to_one():
    ex = _ex(
        "neighborhood-2d",
        "query = [[1.0], [0.0], [2.0], [1.0]]\nkeys = [[1.0], [2.0], [0.0], [1.0]]\n"
        "[params]\nheight = 1\nwidth = 4\nkernel = 3\n",
    )
    want = [[1, 1, 1, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 1, 1, 1]]
    assert neighborhood_mask(ex).int().tolist() == want
    t = run(ex)
    assert _names(t) == ["scores", "scaled_scores", "masked_scores", "weights", "context"]
    q, k = np.array([[1.0], [0.0], [2.0], [1.0]]), np.array([[1.0], [2.0], [0.0], [1.0]])
    w = _softmax(np.where(np.array(want, bool), q @ k.T, -np.inf))
    np.testing.assert_allclose(_shown(ex, t, "weights"), w, atol=1e-12)


def test_neighborhood_grid_must_match_the_rows():
    ex = _ex(
        "neighborhood-2d",
        "query = [[1.0], [0.0], [2.0]]\nkeys = [[1.0], [2.0], [0.0]]\n"
        "[params]\nheight = 2\nwidth = 2\nkernel = 1\n",
    )
    with pytest.raises(ValueError, match=r"a 2 × 2 grid needs 4 queries and keys; got 3 keys$"):
        neighborhood_mask(ex)


def test_single_query_and_num_heads_read_the_file():
    assert single_query(_ex("dot", "query = [1.0, 0.0]\nkeys = [[1.0, 2.0]]\n"))
    assert not single_query(_ex("dot", QK))
    assert not single_query(_ex("dot", "query = []\nkeys = [[1.0, 2.0]]\n"))
    assert num_heads(_ex("dot", QK)) == 1
    assert num_heads(_ex("dot", QK + "[params]\nnum_heads = true\n")) == 1
    assert num_heads(_ex("dot", QK + "[params]\nnum_heads = 3\n")) == 3


def test_a_single_query_drops_its_axis_but_key_steps_keep_theirs():
    ex = _ex("linear", "query = [1.0, 0.0]\nkeys = [[1.0, 2.0], [0.5, -1.0]]\n")
    t = run(ex)
    assert _shown(ex, t, "weights").shape == (2,)
    assert _shown(ex, t, "key_features").shape == (2, 2)
