"""DIN's target attention walked through: its steps against float64 NumPy written here from the paper.

Zhou et al. 2018 (Deep Interest Network), section 4.3: a_j = W_2 PReLU(W_1 [e_j, v_A, e_j − v_A, e_j ⊙ v_A] + b_1) + b_2,
then a softmax over the history (the library's default) or DIN's raw sum pooling. The references read the
example's own TOML numbers and never call attnlab.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.explain import document, load, parse, run, verify
from attnlab.explain.mechanisms import path_for
from attnlab.explain.verify import EXACT
from attnlab.functional.steps import evaluate
from attnlab.functional.target import target_attention
from attnlab.nn.recommendation import TargetAttention

NAME = "attnlab-target-attention"


def _a(x) -> np.ndarray:
    return np.array(x, dtype=np.float64)


def _din(ex, normalise: str = "softmax", mask=None) -> dict[str, np.ndarray]:
    """The activation unit and the pooling in float64 NumPy, from the example's numbers."""
    v, e = _a(ex.inputs["candidate"]), _a(ex.inputs["history"])
    p = {k: _a(ex.params[k]) for k in ("w1", "b1", "prelu", "w2", "b2")}
    x = np.concatenate([e, np.tile(v, (len(e), 1)), e - v, e * v], axis=1)
    h = x @ p["w1"].T + p["b1"]
    act = np.where(h > 0, h, p["prelu"] * h)
    a = act @ p["w2"][0] + p["b2"][0]
    real = np.ones(len(e), bool) if mask is None else _a(mask).astype(bool)
    if normalise == "softmax":
        z = np.where(real, np.exp(a - a[real].max()), 0.0)
        w = z / z.sum()
    else:
        w = np.where(real, a, 0.0)
    return {"features": x, "hidden": h, "activated": act, "scores": a, "weights": w,
            "context": (w[:, None] * np.where(real[:, None], e, 0.0)).sum(0)}


def _steps(ex) -> dict[str, np.ndarray]:
    return {s["name"]: _a(s["value"]) for s in document(ex, run(ex))["steps"]}


def test_the_walkthrough_equals_numpy():
    ex = load(NAME)
    got, want = _steps(ex), _din(ex)
    assert list(got) == ["features", "hidden", "activated", "scores", "weights", "context"]
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-12, err_msg=name)
    verdicts = verify(ex)
    assert len(verdicts) == 4 and all(v.status == EXACT for v in verdicts), verdicts


def _variant(extra_inputs: str, extra_params: str) -> str:
    return (
        'mechanism = "target-attention"\n[inputs]\ncandidate = [1, -0.5]\n'
        f"history = [[1, 1], [0, 2], [-1, 1]]\n{extra_inputs}"
        "[params]\nw1 = [[0.5, 0, 0, 1, 1, 0, 1, -1], [0, 1, -0.5, 0, 0, 0, 0, 2]]\n"
        f"b1 = [0.1, -1]\nprelu = [0.25, 0.5]\nw2 = [[1, -2]]\nb2 = [0.3]\n{extra_params}"
    )


@pytest.mark.parametrize(("normalise", "mask"), [("softmax", None), ("softmax", [1, 0, 1]), ("none", None),
                                                 ("none", [1, 1, 0])])
def test_masked_and_sum_pooled_walkthroughs_equal_numpy(normalise, mask):
    ex = parse(_variant("" if mask is None else f"mask = {mask}\n", f'normalise = "{normalise}"\n'), "din.toml")
    got, want = _steps(ex), _din(ex, normalise, mask)
    for name in ("features", "hidden", "activated", "scores", "weights", "context"):
        if mask is not None and name in ("features", "hidden", "activated", "scores"):
            keep = np.array(mask, bool)  # padded rows: whatever the run computes, they reach nothing
            np.testing.assert_allclose(got[name][keep], want[name][keep], rtol=0, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-12, err_msg=name)


def test_cli_explains_the_example_with_every_claim_exact(capsys):
    assert main(["explain", "--example", NAME]) == 0
    out = capsys.readouterr().out
    assert "4 claims: 4 exact, 0 rounding drift, 0 wrong." in out
    assert "Zhou et al. 2018, https://arxiv.org/abs/1706.06978" in out
    assert main(["explain", "--example", NAME, "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "共 4 个数值：4 个正确" in out and "PReLU 之前的隐藏层" in out


def test_the_module_and_the_function_are_one_computation():
    torch.manual_seed(0)
    m = TargetAttention(3, hidden_dim=4).double()
    c, h = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 5, 3, dtype=torch.float64)
    first, prelu, last = m.unit
    out, w = m(c, h, need_weights=True)
    ref, ref_w = target_attention(c, h, first.weight, first.bias, prelu.weight, last.weight, last.bias)
    assert torch.equal(out, ref) and torch.equal(w, ref_w)
    one, one_w = target_attention(c[0], h[0], first.weight, first.bias, prelu.weight, last.weight, last.bias)
    assert torch.equal(one, ref[0]) and torch.equal(one_w, ref_w[0])


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"normalise": "sum"}, "normalise"),
    ({"mask": torch.ones(3)}, "mask"),
    ({"prelu": torch.ones(3)}, r"prelu must be one slope or one per hidden unit \(2,\); got \(3\)"),
])
def test_bad_arguments_are_refused(kwargs, words):
    args = {"w1": torch.zeros(2, 8), "b1": None, "prelu": torch.tensor(0.25), "w2": torch.zeros(1, 2), "b2": None}
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        target_attention(torch.zeros(2), torch.zeros(3, 2), **args)


def test_a_bad_history_shape_is_refused():
    with pytest.raises(ValueError, match=r"candidate must be \(d,\) or \(b, d\).*history \(4, 3\)"):
        target_attention(torch.zeros(2), torch.zeros(4, 3), torch.zeros(2, 8), None, torch.tensor(0.25),
                         torch.zeros(1, 2), None)


@pytest.mark.parametrize("normalise", ["softmax", "none"])
def test_verify_recomputes_every_step_as_the_run_does(normalise):
    """``attnlab verify`` recomputes a step from the earlier ones: its path gives the run's values exactly."""
    ex = parse(_variant("mask = [1, 0, 1]\n", f'normalise = "{normalise}"\n'), "din.toml")
    t = run(ex)
    env, path = path_for(ex)
    env = dict(env)
    for step in t:
        assert step.name in path, step.name
        assert torch.equal(evaluate(path, env, step.name), step.value), step.name
        env[step.name] = step.value
