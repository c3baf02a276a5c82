"""Walkthroughs: every mechanism's numbers are the library's own, in text, Markdown and JSON, en and zh."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.explain import (
    MECHANISMS,
    builtin_names,
    document,
    load,
    parse,
    render,
    render_markdown,
    run,
    verify,
)
from attnlab.explain.mechanisms import display_value
from attnlab.functional import attentional_output

GOLDEN = Path(__file__).parent / "golden"


def test_every_mechanism_has_an_example():
    covered = {load(n).mechanism for n in builtin_names()}
    assert set(MECHANISMS) <= covered, set(MECHANISMS) - covered


@pytest.mark.parametrize("name", builtin_names())
def test_walkthrough_numbers_are_the_trace(name):
    """The JSON document (what every renderer shows) holds exactly the trace's values, in order."""
    ex = load(name)
    t = run(ex)
    doc = document(ex, t, verify(ex, t))
    assert [s["name"] for s in doc["steps"]] == t.names()
    for s, step in zip(doc["steps"], t):
        shown = display_value(ex, step.name, step.value)
        assert s["shape"] == list(shown.shape)
        expect = shown.tolist()
        for a, b in zip(flat(s["value"]), flat(expect)):
            assert (a == "-inf" and b == -math.inf) or a == b
    json.dumps(doc)  # valid JSON


def flat(x):
    return [z for y in x for z in flat(y)] if isinstance(x, list) else [x]


def _np_attention(q, k, v, scale):
    e = q @ k.T * scale
    a = np.exp(e - e.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return e, a, a @ v


def test_multi_head_walkthrough_against_numpy():
    ex = load("tutorial2-multi-head")
    t = run(ex)
    q, k, v = (np.array(ex.inputs[n], dtype=float) for n in ("query", "keys", "values"))
    w_o = np.array([[float(x) for x in row] for row in ex.params["w_o"]])
    heads = []
    for h in range(2):
        sl = slice(2 * h, 2 * h + 2)
        e, a, c = _np_attention(q[:, sl], k[:, sl], v[:, sl], 1 / math.sqrt(2))
        np.testing.assert_allclose(display_value(ex, "weights", t["weights"].value)[h].numpy(), a, atol=1e-12)
        np.testing.assert_allclose(display_value(ex, "query_heads", t["query_heads"].value)[h].numpy(), q[:, sl])
        heads.append(c)
    cat = np.concatenate(heads, axis=1)
    np.testing.assert_allclose(display_value(ex, "heads", t["heads"].value).numpy(), cat, atol=1e-12)
    np.testing.assert_allclose(display_value(ex, "output", t["output"].value).numpy(), cat @ w_o.T, atol=1e-12)
    # head 1 is the tutorial's own self-attention example: 猫's largest weight is on 上 (0.880)
    assert abs(display_value(ex, "weights", t["weights"].value)[0, 0, 4].item() - 0.880) < 5e-4


def test_self_attention_walkthrough_against_numpy():
    ex = load("attnlab-self-attention")
    t = run(ex)
    x = np.array(ex.inputs["x"], dtype=float)
    wq, wk, wv = (np.array(ex.params[n], dtype=float) for n in ("w_q", "w_k", "w_v"))
    e, a, c = _np_attention(x @ wq.T, x @ wk.T, x @ wv.T, 1 / math.sqrt(2))
    np.testing.assert_allclose(display_value(ex, "weights", t["weights"].value).numpy(), a, atol=1e-12)
    np.testing.assert_allclose(display_value(ex, "context", t["context"].value).numpy(), c, atol=1e-12)
    assert "heads" not in t and "output" not in t  # one head, no W_o


def test_masked_walkthrough_shows_masked_scores():
    ex = load("attnlab-masked-causal")
    t = run(ex)
    ms = display_value(ex, "masked_scores", t["masked_scores"].value)
    assert torch.isneginf(ms).tolist() == np.triu(np.ones((4, 4), bool), 1).tolist()
    assert t["masked_scores"].note == "6 of 16 scores masked"
    assert "6 个被遮住" in render(ex, t, lang="zh")
    assert r"-\infty" in render_markdown(ex, t)


def test_attentional_output_against_numpy():
    c, s = torch.tensor([[0.2, -0.1]], dtype=torch.float64), torch.tensor([[0.6, -0.2]], dtype=torch.float64)
    w = torch.tensor([[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]], dtype=torch.float64)
    b = torch.tensor([0.1, -0.1], dtype=torch.float64)
    out = attentional_output(c, s, w, b)
    ref = np.tanh(w.numpy() @ np.concatenate([c.numpy()[0], s.numpy()[0]]) + b.numpy())
    np.testing.assert_allclose(out.numpy()[0], ref, atol=1e-12)
    with pytest.raises(ValueError, match="d_c \\+ d_s"):
        attentional_output(c, s, w[:, :3])


def test_channel_and_spatial_walkthroughs():
    ex = load("attnlab-channel")
    t = run(ex)
    f = np.array(ex.inputs["feature_map"], dtype=float)
    w1, w2 = np.array(ex.params["w1"], dtype=float), np.array([[float(x) for x in r] for r in ex.params["w2"]])
    mlp = lambda z: w2 @ np.maximum(w1 @ z, 0)  # noqa: E731
    m = 1 / (1 + np.exp(-(mlp(f.mean((1, 2))) + mlp(f.max((1, 2))))))
    np.testing.assert_allclose(display_value(ex, "weights", t["weights"].value).numpy(), m, atol=1e-12)
    ex = load("attnlab-spatial")
    assert display_value(ex, "weights", run(ex)["weights"].value).shape == (2, 3)


def test_golden_text_en_zh():
    ex = load("tutorial1-additive")
    t = run(ex)
    v = verify(ex, t)
    for lang in ("en", "zh"):
        want = (GOLDEN / f"tutorial1-additive.{lang}.txt").read_text(encoding="utf-8")
        assert render(ex, t, v, digits=4, lang=lang) == want, f"golden {lang} differs"


def test_cli_formats(capsys):
    assert main(["explain", "additive", "--example", "tutorial1-additive", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert r"$$e_{ij} = v^\top u_{ij}$$" in md and r"\begin{bmatrix}" in md
    assert main(["explain", "multi_head", "--format", "json", "--lang", "zh"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mechanism"] == "multi-head" and doc["ok"] is True
    assert [s["name"] for s in doc["steps"]][:3] == ["query_heads", "key_heads", "value_heads"]
    assert main(["explain", "multi_head"]) == 0
    assert "head 2" in capsys.readouterr().out
    assert main(["explain", "--list"]) == 0
    assert "tutorial2-multi-head" in capsys.readouterr().out


@pytest.mark.parametrize("mech", sorted(MECHANISMS))
def test_cli_explain_every_mechanism(mech, capsys):
    assert main(["explain", mech]) == 0
    out = capsys.readouterr().out
    assert "Step 1." in out and "exact" in out


def test_cli_errors(capsys):
    assert main(["explain", "nope"]) == 2
    assert main(["explain", "dot", "--example", "tutorial1-additive"]) == 2
    assert "not 'dot'" in capsys.readouterr().err


def _elu1(x):
    return np.where(x > 0, x + 1.0, np.exp(x))  # elu(x) + 1


@pytest.mark.parametrize("mask", [None, [1, 0, 1]])  # no mask, a key mask: both keep linear attention's linear form
def test_linear_walkthrough_without_causal_shows_similarities_and_weights(mask):
    """Katharopoulos et al. 2020, eq. 4: s_ij = φ(q_i)ᵀφ(k_j) over the allowed keys, α_ij = s_ij / Σ_j s_ij."""
    q, k, v = [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [-1.0, 1.0], [0.0, 2.0]], [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    text = (f'mechanism = "linear"\n[inputs]\nquery = {q}\nkeys = {k}\nvalues = {v}\n'
            + (f"mask = {mask}\n" if mask else ""))
    t = run(parse(text, "lin.toml"))
    allowed = np.array(mask if mask else [1, 1, 1], dtype=bool)
    s = np.where(allowed, _elu1(np.array(q)) @ _elu1(np.array(k)).T, 0.0)
    a = s / s.sum(-1, keepdims=True)
    assert t.names() == ["query_features", "key_features", "similarities", "weights", "context"]
    np.testing.assert_allclose(t["similarities"].value.numpy(), s, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t["weights"].value.numpy(), a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t["context"].value.numpy(), a @ np.array(v), rtol=0, atol=1e-12)


def test_attentional_walkthrough_applies_the_mask():
    """Luong et al. 2015: dot scores, masked keys get weight 0; h̃ = tanh(W_c [c; s] + b_c)."""
    q, k = np.array([0.6, -0.2]), np.array([[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]])
    w_c = np.array([[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]])
    text = ('mechanism = "attentional"\n[inputs]\nquery = [0.6, -0.2]\nkeys = [[0.2, 0.5], [0.3, 0.1], [-0.1, 0.4]]\n'
            'mask = [1, 0, 1]\n[params]\nw_c = [[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]]\n')
    ex = parse(text, "att.toml")
    t = run(ex)
    e = np.exp(k @ q) * [1, 0, 1]
    a = e / e.sum()
    c = a @ k
    np.testing.assert_allclose(display_value(ex, "weights", t["weights"].value).numpy().ravel(), a, atol=1e-12)
    np.testing.assert_allclose(t["context"].value.numpy().ravel(), c, atol=1e-12)
    np.testing.assert_allclose(t["output"].value.numpy().ravel(), np.tanh(w_c @ np.concatenate([c, q])), atol=1e-12)


def test_example_errors_name_the_line_and_what_is_allowed():
    from attnlab.explain.examples import ExampleError

    text = 'mechanism = "general"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[params]\nscore = "cosine"\n'
    with pytest.raises(ExampleError) as e:
        run(parse(text, "s.toml"))
    assert str(e.value) == ("s.toml, line 6: [params] score: unknown score 'cosine'; "
                            "known: dot, scaled_dot, general, additive, concat")
    text = 'mechanism = "gqa"\n[inputs]\nx = [[1, 0, 0, 1]]\n[params]\nnum_heads = 3\nnum_kv_heads = 2\n'
    with pytest.raises(ExampleError) as e:
        run(parse(text, "g.toml"))
    assert str(e.value) == "g.toml, line 6: [params] num_kv_heads: must divide num_heads=3; got 2"
