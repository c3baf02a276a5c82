"""The step paths of ``attnlab.functional.steps``, built at test time and evaluated step by step.

``steps.PATHS`` is built when the module is imported; these tests call the builders themselves
(``_heads``, ``_core``, ``attention_path``, ``_map``) and check the keys each path has and the value
of every step against a float64 NumPy reference written here from the equations:

    e = q kᵀ,  e·s,  e ← −∞ where masked,  α = softmax(e) over the allowed keys,  c = α v,
    heads: (b, n, h·d_h) → (b, h, n, d_h) with head i = features [i·d_h, (i+1)·d_h).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlab.functional import steps

RNG = np.random.default_rng(7)


def np_softmax(e: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """Row softmax over the allowed keys (all when None); float64."""
    e = np.asarray(e, dtype=np.float64)
    allowed = np.ones(e.shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, e.shape)
    x = np.where(allowed, e, -np.inf)
    x = np.exp(x - x.max(-1, keepdims=True))
    return x / x.sum(-1, keepdims=True)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(a, dtype=torch.float64)


def env_qkv(scale: float = 0.37) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    """q (2, 3, 4), k (2, 5, 4), v (2, 5, 3), a mask that forbids some keys (never a whole row), a scale ≠ 1."""
    q, k, v = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 5, 4)), RNG.normal(size=(2, 5, 3))
    allowed = np.ones((2, 3, 5), dtype=bool)
    allowed[0, 0, [1, 3]] = False
    allowed[1, 2, [0, 2, 4]] = False
    allowed[0, 2, 0] = False
    arrays = {"q": q, "k": k, "v": v, "allowed": allowed}
    env = {"q": t(q), "k": t(k), "v": t(v), "mask": torch.tensor(allowed), "scale": torch.tensor(scale, dtype=torch.float64)}
    return env, arrays


def test_core_has_the_three_step_names_reading_the_given_score_step_and_values() -> None:
    core = steps._core("my_scores", "my_values")
    assert list(core) == ["masked_scores", "weights", "context"]
    assert core["masked_scores"].args == ("my_scores", "mask")
    assert core["weights"].args == ("my_scores", "mask?")
    assert core["context"].args == ("weights", "my_values")


def test_core_steps_compute_masking_masked_softmax_and_the_weighted_sum() -> None:
    env, a = env_qkv()
    e = RNG.normal(size=(2, 3, 5))
    env["e"] = t(e)
    core = steps._core("e", "v")
    masked = steps.evaluate(core, dict(env), "masked_scores").numpy()
    np.testing.assert_array_equal(masked, np.where(a["allowed"], e, -np.inf))
    alpha = np_softmax(e, a["allowed"])
    np.testing.assert_allclose(steps.evaluate(core, dict(env), "weights").numpy(), alpha, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(steps.evaluate(core, dict(env), "context").numpy(), alpha @ a["v"], rtol=1e-12, atol=1e-14)
    # without a mask the weights step reads "mask?" as absent: the plain softmax
    env.pop("mask")
    np.testing.assert_allclose(steps.evaluate(core, dict(env), "weights").numpy(), np_softmax(e), rtol=1e-12)


@pytest.mark.parametrize("score", ["dot", "scaled_dot", "general", "additive", "concat"])
def test_attention_path_names_the_score_steps_then_the_core(score: str) -> None:
    path = steps.attention_path(score)
    score_steps = {
        "dot": ["scores"],
        "scaled_dot": ["scores", "scaled_scores"],
        "general": ["projected_keys", "scores"],
        "additive": ["projected_query", "projected_keys", "preactivation", "tanh", "scores"],
        "concat": ["projected_query", "projected_keys", "preactivation", "tanh", "scores"],
    }[score]
    assert list(path) == [*score_steps, "masked_scores", "weights", "context"]
    last = "scaled_scores" if score == "scaled_dot" else "scores"
    assert path["masked_scores"].args == (last, "mask")
    assert path["weights"].args == (last, "mask?")
    assert path["context"].args == ("weights", "v")


@pytest.mark.parametrize("score", ["dot", "scaled_dot"])
def test_attention_path_evaluated_from_q_k_v_alone_matches_numpy(score: str) -> None:
    s = 0.37
    env, a = env_qkv(s)
    e = a["q"] @ a["k"].swapaxes(-1, -2)
    if score == "scaled_dot":
        e = e * s
    alpha = np_softmax(e, a["allowed"])
    path = steps.attention_path(score)
    np.testing.assert_allclose(
        steps.evaluate(path, dict(env), "masked_scores").numpy(), np.where(a["allowed"], e, -np.inf), rtol=1e-12
    )
    np.testing.assert_allclose(steps.evaluate(path, dict(env), "weights").numpy(), alpha, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(steps.evaluate(path, dict(env), "context").numpy(), alpha @ a["v"], rtol=1e-12, atol=1e-14)


def test_attention_path_additive_evaluated_from_its_parameters_matches_numpy() -> None:
    env, a = env_qkv()
    w_q, w_k, v_vec = RNG.normal(size=(6, 4)), RNG.normal(size=(6, 4)), RNG.normal(size=6)
    env.update(w_q=t(w_q), w_k=t(w_k), v_vec=t(v_vec))
    e = np.einsum("a,bqka->bqk", v_vec, np.tanh((a["q"] @ w_q.T)[:, :, None, :] + (a["k"] @ w_k.T)[:, None, :, :]))
    alpha = np_softmax(e, a["allowed"])
    path = steps.attention_path("additive")
    np.testing.assert_allclose(steps.evaluate(path, dict(env), "context").numpy(), alpha @ a["v"], rtol=1e-12, atol=1e-14)


def test_heads_step_splits_the_named_tensor_by_h_from_the_environment() -> None:
    step = steps._heads("projected_query")
    assert step.args == ("projected_query", "h")
    x = RNG.normal(size=(2, 3, 6))  # (b, n, h·d_h) with h = 3, d_h = 2
    out = step({"projected_query": t(x), "h": torch.tensor(3)}).numpy()
    ref = np.stack([x[:, :, 2 * i : 2 * i + 2] for i in range(3)], axis=1)  # (b, h, n, d_h)
    np.testing.assert_array_equal(out, ref)


def test_map_names_one_softmax_map_of_differential_attention() -> None:
    for n in (1, 2):
        m = steps._map(n)
        assert list(m) == [f"scores_{n}", f"scaled_scores_{n}", f"masked_scores_{n}", f"weights_{n}"]
        assert m[f"scores_{n}"].args == (f"q{n}", f"k{n}")
        assert m[f"scaled_scores_{n}"].args == (f"scores_{n}", "scale")
        assert m[f"masked_scores_{n}"].args == (f"scaled_scores_{n}", "mask")
        assert m[f"weights_{n}"].args == (f"scaled_scores_{n}", "mask?")


@pytest.mark.parametrize("n", [1, 2])
def test_map_steps_evaluated_from_qn_kn_match_numpy(n: int) -> None:
    s = 0.37
    env, a = env_qkv(s)
    qn, kn = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(2, 5, 4))
    env.update({f"q{n}": t(qn), f"k{n}": t(kn)})
    e = qn @ kn.swapaxes(-1, -2)
    m = steps._map(n)
    np.testing.assert_allclose(steps.evaluate(m, dict(env), f"scores_{n}").numpy(), e, rtol=1e-12)
    np.testing.assert_allclose(steps.evaluate(m, dict(env), f"scaled_scores_{n}").numpy(), e * s, rtol=1e-12)
    masked = steps.evaluate(m, dict(env), f"masked_scores_{n}").numpy()
    np.testing.assert_allclose(masked, np.where(a["allowed"], e * s, -np.inf), rtol=1e-12)
    np.testing.assert_allclose(
        steps.evaluate(m, dict(env), f"weights_{n}").numpy(), np_softmax(e * s, a["allowed"]), rtol=1e-12, atol=1e-14
    )


def test_core_masked_scores_adds_a_float_bias() -> None:
    env, _ = env_qkv()
    e, bias = RNG.normal(size=(2, 3, 5)), RNG.normal(size=(2, 3, 5))
    bias[0, 1, 2] = -np.inf
    env.update(e=t(e), mask=t(bias))
    core = steps._core("e", "v")
    np.testing.assert_array_equal(steps.evaluate(core, dict(env), "masked_scores").numpy(), e + bias)
    np.testing.assert_allclose(
        steps.evaluate(core, dict(env), "weights").numpy(), np_softmax(e + bias), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("name", ["doubled", "sum_X"])
def test_evaluate_computes_an_optional_argument_that_names_a_step_first(name: str) -> None:
    path = {
        name: steps.StepFn(lambda x: 2 * x, ("x",)),
        "out": steps.StepFn(lambda a, b: a + (0 if b is None else b), ("x", f"{name}?")),
    }
    env = {"x": torch.tensor([1.0, 2.0])}
    np.testing.assert_array_equal(steps.evaluate(path, env, "out").numpy(), [3.0, 6.0])  # x + 2x
    assert env[name].tolist() == [2.0, 4.0]  # kept in env
    # absent and not a step: None
    path2 = {"out": steps.StepFn(lambda a, b: a if b is None else a + b, ("x", "nothing?"))}
    np.testing.assert_array_equal(steps.evaluate(path2, {"x": torch.tensor([1.0])}, "out").numpy(), [1.0])
