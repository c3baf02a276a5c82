"""What ``verify`` recomputes each step from (``attnlab.explain.recompute``), for every mechanism kind.

Each case is a tiny hand-written example that reaches one of ``recompute``'s branches (a given scale, a
mask, each score kind, given or absent projections, biases, heads, the two DIN poolings ...). Every step,
recomputed from the earlier recorded steps with the inputs and parameters ``recompute`` reads, must give the
recorded value; the last step (and the weights) must match float64 NumPy written here from the papers'
formulas. A recomputation fed one *written* earlier value must give NumPy's answer from that written value.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.explain import run
from attnlab.explain.examples import ExampleError, parse
from attnlab.explain.mechanisms import path_for
from attnlab.explain.verify import DRIFT, EXACT, _hand, verify

Q = [[1.0, 0.0], [0.5, -1.0]]
K = [[1.0, 2.0], [0.5, -1.0], [0.0, 1.0]]
V = [[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]
QKV = f"query = {Q}\nkeys = {K}\nvalues = {V}\n"
MASK = [[1, 0, 1], [1, 1, 0]]


def softmax(e, mask=None):
    e = np.array(e, dtype=np.float64)
    if mask is not None:
        e = np.where(np.array(mask, dtype=bool), e, -np.inf)
    w = np.exp(e - e.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def attention(scores, mask=None, v=V):
    w = softmax(scores, mask)
    return w, w @ np.array(v)


q, k, v = np.array(Q), np.array(K), np.array(V)
W = np.array([[1.0, -1.0], [0.5, 2.0]])
WQ, WK, VV = (
    np.array([[1.0, 0.0], [1.0, 1.0]]),
    np.array([[0.0, 1.0], [-1.0, 0.5]]),
    np.array([1.0, -2.0]),
)
WCAT = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, -1.0, 0.5]])  # [W_q | W_k] with different halves
W_C = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, -1.0]])
B_C = np.array([0.5, -0.25])


def additive(wq, wk):
    return np.array([[VV @ np.tanh(wq @ qi + wk @ kj) for kj in k] for qi in q])


def _attn_ref(score, mask=None):
    return attention(score, mask)


def elu1(x):
    return np.where(x > 0, x + 1, np.exp(x))


def mha(x_q, x_k, x_v, heads, wq, wk, wv, wo, mask=None, scale=None, kv_heads=None):
    kv_heads = kv_heads or heads
    pq, pk, pv = x_q @ wq.T, x_k @ wk.T, x_v @ wv.T
    d_h = pq.shape[1] // heads
    outs = []
    for i in range(heads):
        j = i * kv_heads // heads
        qh, kh, vh = (
            pq[:, i * d_h : (i + 1) * d_h],
            pk[:, j * d_h : (j + 1) * d_h],
            pv[:, j * d_h : (j + 1) * d_h],
        )
        s = (qh @ kh.T) * (scale if scale is not None else 1 / np.sqrt(d_h))
        outs.append(attention(s, mask, vh)[1])
    return np.concatenate(outs, -1) @ wo.T


X = np.array([[1.0, 0.0, 2.0, -1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]])
WX = np.array(
    [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]]
)
WO = np.array(
    [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 2.0]]
)


def channel_ref(f, w1, b1, w2, b2):
    avg, mx = f.mean((1, 2)), f.max((1, 2))

    def mlp(x):
        return w2 @ np.maximum(w1 @ x + b1, 0) + b2

    m = 1 / (1 + np.exp(-(mlp(avg) + mlp(mx))))
    return f * m[:, None, None]


def spatial_ref(f, w, b):
    pooled = np.stack([f.mean(0), f.max(0)])
    pad = w.shape[-1] // 2
    p = np.pad(pooled, ((0, 0), (pad, pad), (pad, pad)))
    h, wd = f.shape[1:]
    conv = np.array(
        [
            [(p[:, i : i + w.shape[-1], j : j + w.shape[-1]] * w).sum() + b for j in range(wd)]
            for i in range(h)
        ]
    )
    return f * (1 / (1 + np.exp(-conv)))[None]


F = np.array([[[1.0, -1.0], [2.0, 0.0]], [[0.5, 0.0], [-1.0, 3.0]]])
CW1, CB1, CW2, CB2 = (
    np.array([[1.0, -1.0]]),
    np.array([0.5]),
    np.array([[1.0], [-2.0]]),
    np.array([0.25, -0.5]),
)
SW = np.array(
    [
        [[0.0, 1.0, 0.0], [1.0, -1.0, 0.0], [0.0, 0.5, 0.0]],
        [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, -1.0]],
    ]
)

C, HIST = np.array([1.0, -1.0]), np.array([[1.0, 1.0], [0.0, 2.0], [-1.0, 0.5]])
TW1 = np.array([[1, 0, 0, 1, 1, 0, 0, 0], [0, 1, -1, 0, 0, 0, 1, 1]], dtype=np.float64)
TB1, TW2, TB2 = np.array([0.5, -1.0]), np.array([[1.0, -2.0]]), np.array([0.25])


def din_scores(b1=TB1, b2=TB2, slope=0.25):
    feats = np.concatenate([HIST, np.broadcast_to(C, HIST.shape), HIST - C, HIST * C], -1)
    h = feats @ TW1.T + b1
    a = np.where(h > 0, h, slope * h)
    return (a @ TW2.T + b2)[:, 0]


def latent_ref(mask=None):
    qc = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    qr = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]])
    ckv, kr = (
        np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
        np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]),
    )
    wuk = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
    wuv = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    keys, vals = ckv @ wuk.T, ckv @ wuv.T
    out = []
    for h in range(2):
        s = np.concatenate([qc[:, 2 * h : 2 * h + 2], qr[:, 2 * h : 2 * h + 2]], -1)
        kk = np.concatenate([keys[:, 2 * h : 2 * h + 2], kr], -1)
        out.append(attention(s @ kk.T / np.sqrt(4), mask, vals[:, 2 * h : 2 * h + 2])[1])
    return np.stack(out)


LATENT = """mechanism = "mla"
[inputs]
query = [[1, 0, 0, 1], [0, 1, 1, 0]]
query_rope = [[1, 0, 0, 1], [0, 1, 1, 1]]
latents = [[1, 0], [0, 1], [1, 1]]
key_rope = [[0, 1], [1, 0], [1, 1]]
{mask}[params]
num_heads = 2
w_uk = [[1, 0], [0, 1], [1, 1], [1, -1]]
w_uv = [[1, 0], [0, 1], [0, 1], [1, 0]]
"""

TARGET = f"""mechanism = "target-attention"
[inputs]
candidate = [1, -1]
history = {HIST.tolist()}
{{mask}}[params]
w1 = {TW1.tolist()}
{{b1}}prelu = 0.25
w2 = [[1, -2]]
{{b2}}{{norm}}"""


def _target(mask="", b1=True, b2=True, norm=""):
    return TARGET.format(
        mask=mask, b1="b1 = [0.5, -1]\n" if b1 else "", b2="b2 = [0.25]\n" if b2 else "", norm=norm
    )


def _din_softmax(mask=None, **kw):
    w = softmax(din_scores(**kw), mask)
    return w @ HIST


def _din_sum(mask=None, **kw):
    s = din_scores(**kw)
    if mask is not None:
        s = np.where(np.array(mask, dtype=bool), s, 0.0)
    return s @ HIST


CASES = {
    # name: (example text, last step, NumPy value of the last step as displayed)
    "dot": ('mechanism = "dot"\n[inputs]\n' + QKV, "context", _attn_ref(q @ k.T)[1]),
    "dot-masked": (
        'mechanism = "dot"\n[inputs]\n' + QKV + f"mask = {MASK}\n",
        "context",
        _attn_ref(q @ k.T, MASK)[1],
    ),
    "scaled-dot": (
        'mechanism = "scaled-dot"\n[inputs]\n' + QKV,
        "context",
        _attn_ref(q @ k.T / np.sqrt(2))[1],
    ),
    "scaled-dot-given-scale": (
        'mechanism = "scaled-dot"\n[inputs]\n' + QKV + "[params]\nscale = 0.25\n",
        "context",
        _attn_ref(q @ k.T * 0.25)[1],
    ),
    "causal": (
        'mechanism = "scaled-dot"\n[inputs]\n' + QKV + "[params]\ncausal = true\n",
        "context",
        _attn_ref(q @ k.T / np.sqrt(2), [[1, 1, 0], [1, 1, 1]])[1],
    ),
    "general": (
        'mechanism = "luong-general"\n[inputs]\n' + QKV + f"[params]\nweight = {W.tolist()}\n",
        "context",
        _attn_ref(q @ (k @ W.T).T)[1],
    ),
    "additive": (
        'mechanism = "bahdanau"\n[inputs]\n'
        + QKV
        + f"[params]\nw_q = {WQ.tolist()}\nw_k = {WK.tolist()}\nv = {VV.tolist()}\n",
        "context",
        _attn_ref(additive(WQ, WK))[1],
    ),
    "concat": (
        'mechanism = "luong-concat"\n[inputs]\n'
        + QKV
        + f"[params]\nweight = {WCAT.tolist()}\nv = {VV.tolist()}\n",
        "context",
        _attn_ref(additive(WCAT[:, :2], WCAT[:, 2:]))[1],
    ),
    "masked": (
        'mechanism = "masked"\n[inputs]\n' + QKV + f"mask = {MASK}\n",
        "context",
        _attn_ref(q @ k.T / np.sqrt(2), MASK)[1],
    ),
    "sparse": (
        'mechanism = "sparse"\n[inputs]\n'
        + QKV
        + '[params]\npattern = {name = "sliding_window", before = 1, after = 0}\n',
        "context",
        _attn_ref(q @ k.T / np.sqrt(2), [[1, 1, 0], [0, 1, 1]])[1],
    ),
    "attentional": (
        'mechanism = "attentional"\n[inputs]\n'
        + QKV
        + f"[params]\nw_c = {W_C.tolist()}\nb_c = {B_C.tolist()}\n",
        "output",
        np.tanh(np.concatenate([_attn_ref(q @ k.T)[1], q], -1) @ W_C.T + B_C),
    ),
    "attentional-general": (
        'mechanism = "attentional"\n[inputs]\n'
        + QKV
        + f'[params]\nscore = "general"\nweight = {W.tolist()}\nw_c = {W_C.tolist()}\n',
        "output",
        np.tanh(np.concatenate([_attn_ref(q @ (k @ W.T).T)[1], q], -1) @ W_C.T),
    ),
    "softcap": (
        'mechanism = "softcap"\n[inputs]\n' + QKV + "[params]\ncap = 0.5\n",
        "context",
        _attn_ref(0.5 * np.tanh(q @ k.T / np.sqrt(2) / 0.5))[1],
    ),
    "softcap-scale": (
        'mechanism = "softcap"\n[inputs]\n' + QKV + "[params]\ncap = 2\nscale = 3\n",
        "context",
        _attn_ref(2 * np.tanh(q @ k.T * 3 / 2))[1],
    ),
    "linear": (
        'mechanism = "linear"\n[inputs]\n' + QKV,
        "context",
        (lambda s: (s / s.sum(-1, keepdims=True)) @ v)(elu1(q) @ elu1(k).T),
    ),
    "linear-masked": (
        'mechanism = "linear"\n[inputs]\n' + QKV + f"mask = {MASK}\n",
        "context",
        (lambda s: (s / s.sum(-1, keepdims=True)) @ v)(elu1(q) @ elu1(k).T * np.array(MASK)),
    ),
    "differential": (
        'mechanism = "differential"\n[inputs]\n'
        + f"query_1 = {Q}\nkeys_1 = {K}\nquery_2 = {[[0.0, 1.0], [1.0, 1.0]]}\nkeys_2 = {V}\nvalues = {V}\n"
        + f"mask = {MASK}\n[params]\nlambda = 0.5\nscale = 0.75\n",
        "context",
        (
            softmax(q @ k.T * 0.75, MASK)
            - 0.5 * softmax(np.array([[0.0, 1.0], [1.0, 1.0]]) @ v.T * 0.75, MASK)
        )
        @ v,
    ),
    "differential-default-scale": (
        'mechanism = "differential"\n[inputs]\n'
        + f"query_1 = {Q[:1]}\nkeys_1 = {K}\nquery_2 = {[[0.0, 1.0]]}\nkeys_2 = {V}\nvalues = {V}\n"
        + "[params]\nlambda = 0.25\n",
        "context",
        (
            softmax(q[:1] @ k.T / np.sqrt(2))
            - 0.25 * softmax(np.array([[0.0, 1.0]]) @ v.T / np.sqrt(2))
        )
        @ v,
    ),
    "multi-head-narrow-projections": (  # W_q, W_k, W_v: (2, 4), two heads of one feature each
        'mechanism = "multi-head"\n[inputs]\n'
        + f"x = {X.tolist()}\n[params]\nnum_heads = 2\n"
        + f"w_q = {WX[:2].tolist()}\nw_k = {WO[:2].tolist()}\nw_v = {WX[2:].tolist()}\n",
        "heads",
        mha(X, X, X, 2, WX[:2], WO[:2], WX[2:], np.eye(2)),
    ),
    "self-attention": (
        'mechanism = "self-attention"\n[inputs]\n' + f"x = {X.tolist()}\n",
        "context",
        mha(X, X, X, 1, *[np.eye(4)] * 4),
    ),
    "self-attention-weights": (
        'mechanism = "self-attention"\n[inputs]\n'
        + f"x = {X.tolist()}\nmask = {[[1, 0, 1]] * 3}\n"
        + f"[params]\nw_q = {WX.tolist()}\nw_k = {WX.T.tolist()}\nw_v = {WO.tolist()}\n"
        + f"w_o = {WO.T.tolist()}\nscale = 0.5\n",
        "output",
        mha(X, X, X, 1, WX, WX.T, WO, WO.T, [[1, 0, 1]] * 3, 0.5),
    ),
    "multi-head": (
        'mechanism = "multi-head"\n[inputs]\n'
        + f"x = {X.tolist()}\n[params]\nnum_heads = 2\n"
        + f"w_q = {WX.tolist()}\nw_o = {WO.tolist()}\n",
        "output",
        mha(X, X, X, 2, WX, np.eye(4), np.eye(4), WO),
    ),
    "multi-head-qkv": (
        'mechanism = "multi-head"\n[inputs]\n'
        + f"query = {X[:2].tolist()}\nkeys = {X.tolist()}\n"
        + f"values = {WX[:3].tolist()}\n[params]\nnum_heads = 2\nw_k = {WX.T.tolist()}\nw_v = {WO.tolist()}\n"
        + "causal = true\n",
        "heads",
        mha(X[:2], X, WX[:3], 2, np.eye(4), WX.T, WO, np.eye(4), [[1, 1, 0], [1, 1, 1]]),
    ),
    "cross": (
        'mechanism = "cross"\n[inputs]\n' + QKV + "[params]\nnum_heads = 2\n",
        "heads",
        mha(q, k, v, 2, *[np.eye(2)] * 4),
    ),
    "gqa": (
        'mechanism = "gqa"\n[inputs]\n'
        + f"x = {X.tolist()}\n[params]\nnum_heads = 4\nnum_kv_heads = 2\n"
        + f"w_k = {WX[:2].tolist()}\nw_v = {WO[:2].tolist()}\nscale = 0.5\n",
        "heads",
        mha(X, X, X, 4, np.eye(4), WX[:2], WO[:2], np.eye(4), None, 0.5, 2),
    ),
    "mla": (LATENT.format(mask=""), "context", latent_ref()),
    "mla-masked": (LATENT.format(mask=f"mask = {MASK}\n"), "context", latent_ref(MASK)),
    "neighborhood-2d": (
        'mechanism = "neighborhood-2d"\n[inputs]\nquery = [[1.0], [0.0], [2.0], [1.0]]\n'
        "keys = [[1.0], [2.0], [0.0], [1.0]]\n[params]\nheight = 1\nwidth = 4\nkernel = 3\n",
        "context",
        softmax(
            np.outer([1.0, 0.0, 2.0, 1.0], [1.0, 2.0, 0.0, 1.0]),
            [[1, 1, 1, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 1, 1, 1]],
        )
        @ np.array([[1.0], [2.0], [0.0], [1.0]]),
    ),
    "channel": (
        'mechanism = "channel"\n[inputs]\n'
        + f"feature_map = {F.tolist()}\n[params]\nw1 = {CW1.tolist()}\n"
        + f"b1 = {CB1.tolist()}\nw2 = {CW2.tolist()}\nb2 = {CB2.tolist()}\n",
        "output",
        channel_ref(F, CW1, CB1, CW2, CB2),
    ),
    "channel-no-bias": (
        'mechanism = "channel"\n[inputs]\n'
        + f"feature_map = {F.tolist()}\n[params]\n"
        + f"w1 = {CW1.tolist()}\nw2 = {CW2.tolist()}\n",
        "output",
        channel_ref(F, CW1, 0, CW2, 0),
    ),
    "spatial": (
        'mechanism = "spatial"\n[inputs]\n'
        + f"feature_map = {F.tolist()}\n[params]\nweight = {SW.tolist()}\n"
        + "bias = [0.5]\n",
        "output",
        spatial_ref(F, SW, 0.5),
    ),
    "spatial-4d-no-bias": (
        'mechanism = "spatial"\n[inputs]\n'
        + f"feature_map = {F.tolist()}\n[params]\n"
        + f"weight = {[SW.tolist()]}\n",
        "output",
        spatial_ref(F, SW, 0.0),
    ),
    "target": (_target(), "context", _din_softmax()),
    "target-masked": (_target(mask="mask = [1, 0, 1]\n"), "context", _din_softmax([1, 0, 1])),
    "target-no-bias": (_target(b1=False, b2=False), "context", _din_softmax(b1=0.0, b2=0.0)),
    "target-sum": (_target(norm='normalise = "none"\n'), "context", _din_sum()),
    "target-sum-masked": (
        _target(mask="mask = [1, 1, 0]\n", norm='normalise = "none"\n'),
        "context",
        _din_sum([1, 1, 0]),
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_each_step_recomputed_from_the_recorded_ones_and_the_last_against_numpy(case):
    text, last, expected = CASES[case]
    ex = parse(text)
    t = run(ex)
    assert t.steps[-1].name == last
    for i, step in enumerate(t.steps):
        got = _hand(ex, t, i, [], None)
        assert got.shape == step.value.shape, step.name
        torch.testing.assert_close(
            got, step.value, rtol=0, atol=1e-12, equal_nan=True, msg=step.name
        )
    np.testing.assert_allclose(
        t.steps[-1].value.reshape(expected.shape).numpy(), expected, rtol=0, atol=1e-12
    )


def test_every_mechanism_names_its_recomputation():
    from attnlab.explain.mechanisms import MECHANISMS

    assert all(callable(m.recompute) for m in MECHANISMS.values())


def test_the_environment_holds_the_given_scale_and_the_default_one_over_root_d():
    env, _ = path_for(
        parse('mechanism = "scaled-dot"\n[inputs]\n' + QKV + "[params]\nscale = 0.25\n")
    )
    assert float(env["scale"]) == 0.25 and env["scale"].dtype == torch.float64
    env, _ = path_for(
        parse('mechanism = "dot"\n[inputs]\n' + f"query = [1, 0, 0]\nkeys = {[[1, 2, 3]] * 2}\n")
    )
    assert float(env["scale"]) == pytest.approx(1 / np.sqrt(3))
    env, _ = path_for(parse(CASES["multi-head"][0]))  # the head size: 4 features / 2 heads
    assert float(env["scale"]) == pytest.approx(1 / np.sqrt(2)) and int(env["h"]) == 2
    env, _ = path_for(parse(LATENT.format(mask="")))  # 1/√(d_h + d_R) = 1/√(2 + 2)
    assert float(env["scale"]) == pytest.approx(0.5) and int(env["h"]) == 2
    env, _ = path_for(parse(CASES["gqa"][0]))
    assert (int(env["h"]), int(env["h_kv"]), int(env["groups"])) == (4, 2, 2)
    env, _ = path_for(parse(CASES["linear"][0]))
    assert "scale" not in env and "mask" not in env


def test_concat_splits_its_weight_into_query_and_key_columns():
    env, _ = path_for(parse(CASES["concat"][0]))
    np.testing.assert_array_equal(env["w_q"].numpy(), WCAT[:, :2])
    np.testing.assert_array_equal(env["w_k"].numpy(), WCAT[:, 2:])
    np.testing.assert_array_equal(env["v_vec"].numpy(), VV)


def test_a_single_latent_head_by_default():
    text = LATENT.format(mask="").replace("num_heads = 2\n", "")
    env, _ = path_for(parse(text))
    assert int(env["h"]) == 1 and tuple(env["q_c"].shape) == (1, 1, 2, 4)


def test_target_sum_pooling_zeroes_padded_history_rows_before_any_arithmetic():
    env, path = path_for(parse(_target(mask="mask = [1, 1, 0]\n", norm='normalise = "none"\n')))
    np.testing.assert_array_equal(env["history"].numpy(), [[[1.0, 1.0], [0.0, 2.0], [0.0, 0.0]]])
    assert env["mask"].tolist() == [[True, True, False]]
    env, path = path_for(parse(_target(mask="mask = [1, 1, 0]\n")))
    assert tuple(env["mask"].shape) == (1, 1, 3) and tuple(env["history"].shape) == (1, 3, 2)
    assert "masked_scores" in path


def test_a_written_earlier_value_is_what_the_later_step_is_recomputed_from():
    """The scores written at one decimal give the weights softmax([0.3, 0.2, ...]), not the exact ones."""
    text = 'mechanism = "dot"\n[inputs]\nquery = [1.0, 1.0]\nkeys = [[0.33, 0.0], [0.0, 0.17], [0.2, 0.2]]\n'
    w = softmax([0.3, 0.2, 0.4])
    text += '[[claim]]\nstep = "scores"\nvalue = [0.3, 0.2, 0.4]\n'
    text += f'[[claim]]\nstep = "weights"\nvalue = [{w[0]:.4f}, {w[1]:.4f}, {w[2]:.4f}]\n'
    verdicts = verify(parse(text))
    assert [(v.status, v.rule) for v in verdicts] == [(EXACT, ""), (DRIFT, "own values")]
    exact = softmax([0.33, 0.17, 0.4])
    assert not np.allclose(np.round(exact, 4), np.round(w, 4))
    assert verdicts[1].true == pytest.approx(exact.tolist(), abs=1e-12)


@pytest.mark.parametrize("case", ["general", "concat"])
def test_a_missing_or_unreadable_weight_is_named_in_the_params_table(case):
    text = CASES[case][0]
    start = text.index("weight = ")
    line = text[start : text.index("\n", start) + 1]
    with pytest.raises(ExampleError, match=r"\[params\]: mechanism '[a-z-]+' needs weight$"):
        path_for(parse(text.replace(line, "")))
    with pytest.raises(ExampleError, match=r"\[params\] weight: expected numbers or nested lists of numbers; got 'abc'"):
        path_for(parse(text.replace(line, 'weight = "abc"\n')))
