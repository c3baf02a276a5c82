"""The checker: exact / rounding drift / wrong, on the tutorials' examples, attnlab's own, and built cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.explain import builtin_names, load, parse, run, verify
from attnlab.explain.examples import ExampleError
from attnlab.explain.verify import DRIFT, EXACT, WRONG, _hand


def by_where(verdicts):
    return {v.where(): v for v in verdicts}


def test_seed_000_classification():
    v = by_where(verify(load("tutorial1-additive")))
    assert v["projected_query"].status == EXACT
    assert v["projected_keys[1]"].status == EXACT
    assert v["preactivation[1]"].status == EXACT
    # tanh(0.64) = 0.5649: one rounding gives 0.56; 0.5649 → 0.565 → 0.57 is double rounding
    assert math.isclose(v["tanh[1]"].true[1], math.tanh(0.64), rel_tol=1e-12)
    assert (v["tanh[1]"].status, v["tanh[1]"].rule) == (DRIFT, "double rounding")
    # 1.0 × 0.40 + 2.0 × 0.57 = 1.54 from the text's own tanh values; exact 1.527
    assert (v["scores[1]"].status, v["scores[1]"].rule) == (DRIFT, "own values")
    assert v["scores[2]"].status == WRONG
    assert abs(v["scores[2]"].true - 0.969) < 5e-4
    # tanh of h_3's sum written at two decimals, [0.21, 0.34], gives 0.89; exact 0.880
    assert (v["scores[3]"].status, v["scores[3]"].rule) == (DRIFT, "working precision")
    assert v["weights"].status == WRONG and v["weights"].upstream == "scores[2]"
    assert v["context"].status == WRONG and v["context"].upstream == "scores[2]"
    # the text's own scores [1.54, 1.32, 0.89] give different weights from the ones it writes
    e = np.exp([1.54, 1.32, 0.89])
    np.testing.assert_allclose(v["weights"].own, e / e.sum(), atol=1e-12)


def test_seed_001_argmax_wrong():
    v = by_where(verify(load("tutorial2-self-attention")))
    w = v["weights[1]"]
    assert w.status == WRONG and w.true == 5
    q1, k = np.array([1.0, 2.0]), np.array([[j, j] for j in range(1, 6)], dtype=float)
    e = k @ q1 / math.sqrt(2)
    alpha = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
    assert w.true == int(alpha.argmax()) + 1 and abs(w.true_max - alpha.max()) < 1e-12
    assert abs(w.true_max - 0.880) < 5e-4
    assert v["scaled_scores[1, 1]"].status == EXACT


@pytest.mark.parametrize("name", [n for n in builtin_names() if n not in ("tutorial1-additive", "tutorial2-self-attention")])
def test_correct_examples_all_exact(name):
    verdicts = verify(load(name))
    assert verdicts, f"{name} has no claims"
    assert [v.status for v in verdicts] == [EXACT] * len(verdicts), [(v.where(), v.status) for v in verdicts]


@pytest.mark.parametrize("name", builtin_names())
def test_chain_reproduces_the_trace(name):
    """The step functions, with nothing substituted, gives the library's numbers."""
    ex = load(name)
    t = run(ex)
    for i, step in enumerate(t.steps):
        got = _hand(ex, t, i, [], None)
        assert got.shape == step.value.shape, step.name
        torch.testing.assert_close(got, step.value, rtol=0, atol=1e-12, equal_nan=True, msg=step.name)


DRIFT_EXAMPLE = """
mechanism = "dot"
[inputs]
query = [1.0, 1.0]
keys = [[0.333, 0.0], [0.0, 0.167], [0.2, 0.2]]

[[claim]]             # exact: 0.333
step = "scores"
index = [1]
value = 0.333

[[claim]]             # exact
step = "scores"
index = [2]
value = 0.167

[[claim]]             # exact: 0.4
step = "scores"
index = [3]
value = 0.4

[[claim]]             # scores written at one decimal: [0.3, 0.2, 0.4]
step = "scores"
value = [0.3, 0.2, 0.4]

[[claim]]             # from the written (rounded) scores: drift
step = "weights"
value = [0.3322, 0.3006, 0.3672]

[[claim]]             # plain wrong
step = "weights"
index = [3]
value = 0.5

[[claim]]
step = "context"
value = [0.1, 0.1]
"""


def test_rounding_drift_built_example():
    ex = parse(DRIFT_EXAMPLE, "drift.toml")
    v = verify(ex)
    assert [x.status for x in v[:4]] == [EXACT] * 4
    # softmax of the exact scores [0.333, 0.167, 0.4] vs of the written [0.3, 0.2, 0.4]
    exact = np.exp([0.333, 0.167, 0.4]) / np.exp([0.333, 0.167, 0.4]).sum()
    written = np.exp([0.3, 0.2, 0.4]) / np.exp([0.3, 0.2, 0.4]).sum()
    assert np.round(written, 4).tolist() == [0.3322, 0.3006, 0.3672]
    assert not np.allclose(np.round(exact, 4), np.round(written, 4))
    assert (v[4].status, v[4].rule) == (DRIFT, "own values")
    assert v[5].status == WRONG and abs(v[5].true - exact[2]) < 1e-12
    assert v[6].status == WRONG


def test_wrong_that_follows_from_an_earlier_wrong_claim():
    text = """
mechanism = "dot"
[inputs]
query = [1.0]
keys = [[1.0], [0.0]]
[[claim]]
step = "scores"
value = [3, 0]         # wrong: the true scores are [1, 0]
[[claim]]
step = "weights"
value = [0.95, 0.05]   # softmax([3, 0]) = [0.9526, 0.0474]: right from the wrong scores
"""
    v = verify(parse(text, "f.toml"))
    assert v[0].status == WRONG
    assert v[1].status == WRONG and v[1].follows_from == "scores" and v[1].upstream == "scores"


def test_cli_exit_codes(capsys):
    assert main(["verify", "tutorial2-bahdanau", "tutorial2-multi-head"]) == 0
    assert main(["verify", "tutorial1-additive"]) == 1
    out = capsys.readouterr().out
    assert "scores[2] = 1.32" in out and "0.9687" in out and "WRONG" in out
    assert main(["verify", "tutorial2-self-attention", "--lang", "zh"]) == 1
    assert "第 5 位" in capsys.readouterr().out


def test_cli_json(capsys):
    import json

    assert main(["verify", "tutorial1-additive", "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    statuses = {c["step"] + str(c["index"]): c["status"] for c in doc[0]["claims"]}
    assert statuses["scores[2]"] == "wrong" and statuses["scores[1]"] == "rounding drift"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('mechanism = "dot"\n[inputs]\nquery = [1.0\n', ["not valid TOML", "line"]),
        ('mechanism = "nope"\n[inputs]\nquery = [1.0]\n', ["line 1", "unknown mechanism 'nope'"]),
        ('mechanism = "dot"\n', ["missing the table [inputs]"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\n', ["[inputs]", "needs keys"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0, 2.0]\nkeys = [[1.0, 2.0], [1.0]]\n', ["line 4", "keys", "same length"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0, 2.0]\nkeys = [[1.0, 2.0, 3.0]]\n', ["query", "d=2", "d=3"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[[claim]]\nstep = "tanh"\nvalue = 1\n',
         ["line 5", "unknown step 'tanh'", "scores"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n\n[[claim]]\nstep = "scores"\nindex = [3]\nvalue = 1\n',
         ["line 6", "out of range"]),
        ('mechanism = "multi_head"\n[inputs]\nx = [[1.0, 2.0]]\n[params]\nnum_heads = 0\n', ["line 5", "num_heads"]),
        ('mechanism = "gqa"\n[inputs]\nx = [[1.0, 2.0]]\n[params]\nnum_heads = 2\n',
         ["bad.toml, line 4: [params]: mechanism 'gqa' needs num_kv_heads"]),
        ('mechanism = "dot"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n[[claim]]\nstep = "scores"\nvalue = 1\n\n'
         '[[claim]]\nstep = "tanh"\nvalue = 1\n',
         ["bad.toml, line 9: [[claim]] #2: unknown step 'tanh'; this mechanism's steps: scores, weights, context"]),
        ('mechanism = "sparse"\n[inputs]\nquery = [[1.0], [0.0]]\nkeys = [[1.0], [0.0]]\nvalues = [[1.0], [0.0]]\n'
         '[params]\npattern = {name = "nope"}\n',
         ["bad.toml, line 7: [params] pattern: no pattern 'nope'; known: full, causal, sliding_window, dilated_window, "
          "strided, fixed, global_tokens, random_blocks"]),
    ],
)
def test_malformed_files_name_field_and_line(text, words):
    with pytest.raises(ExampleError) as e:
        ex = parse(text, "bad.toml")
        verify(ex)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_cli_malformed_file_exits_2(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('mechanism = "additive"\n[inputs]\nquery = [1.0]\nkeys = [[1.0]]\n', encoding="utf-8")
    assert main(["verify", str(f)]) == 2
    assert "needs w_q" in capsys.readouterr().err


def test_an_attentional_example_without_a_score_uses_the_dot_score():
    """Luong's attentional output with the default (dot) score, by hand: scores [1, 0], weights
    softmax = [0.7311, 0.2689], context = weights · keys = [0.7311, 0.2689], W_c [c; s] = [c_1, s_2] = [0.7311, 0],
    tanh → [0.6237, 0]."""
    text = ('mechanism = "attentional"\n[inputs]\nquery = [1.0, 0.0]\nkeys = [[1.0, 0.0], [0.0, 1.0]]\n'
            '[params]\nw_c = [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]\n'
            '[[claim]]\nstep = "scores"\nvalue = [1.0, 0.0]\n\n[[claim]]\nstep = "weights"\nvalue = [0.7311, 0.2689]\n\n'
            '[[claim]]\nstep = "context"\nvalue = [0.7311, 0.2689]\n\n[[claim]]\nstep = "output"\nvalue = [0.6237, 0.0]\n')
    assert math.isclose(math.tanh(math.e / (math.e + 1)), 0.6237, abs_tol=5e-5)
    verdicts = verify(parse(text, "a.toml"))
    assert [v.status for v in verdicts] == [EXACT] * 4
    # carried on from weights written as [0.7, 0.3]: context [0.7, 0.3], output tanh(0.7) = 0.6044 (drift, not wrong)
    drift = text.split("[[claim]]")[0] + ('[[claim]]\nstep = "weights"\nvalue = [0.7, 0.3]\n\n'
                                          '[[claim]]\nstep = "output"\nvalue = [0.6044, 0.0]\n')
    assert math.isclose(math.tanh(0.7), 0.6044, abs_tol=5e-5)
    assert [v.status for v in verify(parse(drift, "a.toml"))] == [EXACT, DRIFT]
