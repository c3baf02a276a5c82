"""A new mechanism is one file and one registration line (importing it): ``toy_mechanism.py`` registers a
temperature attention, and it appears in ``create``, ``available``, the alias table, ``explain``'s names,
the example schema, the walkthrough and ``verify``'s recomputation; nothing else is edited."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import attnlab
from attnlab.explain import mechanisms, names, parse, run, spec, verify
from attnlab.explain.verify import DRIFT, EXACT
from attnlab.functional.steps import evaluate
from attnlab.nn import registry

TOY = Path(__file__).with_name("toy_mechanism.py")
EXAMPLE = """
mechanism = "temperature"
[inputs]
query = [1.0, 0.0]
keys = [[1.0, 0.0], [0.0, 1.0], [0.7, 0.0]]
[params]
tau = 3.0
"""


@pytest.fixture
def toy():
    """The toy file imported (the one registration line), and every record of it removed afterwards."""
    module_spec = importlib.util.spec_from_file_location("toy_mechanism", TOY)
    module = importlib.util.module_from_spec(module_spec)
    try:
        sys.modules["toy_mechanism"] = module
        module_spec.loader.exec_module(module)  # the registration line
        yield module
    finally:
        sys.modules.pop("toy_mechanism", None)
        registry.RECORDS.pop("toy-temperature", None)
        registry.ALIASES.pop("temperature", None)
        mechanisms.MECHANISMS.pop("toy-temperature", None)
        if "toy-temperature" in names.NAMES:
            names.NAMES.remove("toy-temperature")
    assert "toy-temperature" not in attnlab.available()


def test_the_toy_is_created_by_its_name_and_its_alias(toy):
    assert "toy-temperature" in attnlab.available()
    assert registry.canonical("temperature") == "toy-temperature"
    m = attnlab.create("temperature", tau=4.0)
    assert type(m) is toy.TemperatureAttention and m.tau == 4.0
    assert registry.record("toy-temperature").functional is toy.temperature_attention
    q, k, v = torch.randn(3, 2, 4, dtype=torch.float64).unbind(0)
    out, w = m(q, k, v, need_weights=True)
    expected = torch.softmax(q @ k.T / 4.0, dim=-1)  # softmax(q kᵀ / τ), written here
    torch.testing.assert_close(w, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, expected @ v, rtol=0, atol=1e-12)


def test_the_toy_is_an_explain_name_and_in_the_schema(toy):
    assert "toy-temperature" in names.NAMES
    assert parse(EXAMPLE, "toy.toml").mechanism == "toy-temperature"
    schema = spec.schema()
    assert {"toy-temperature", "toy_temperature", "temperature"} <= set(schema["properties"]["mechanism"]["enum"])
    assert schema["properties"]["params"]["properties"]["tau"] == {"type": "number", "exclusiveMinimum": 0}
    clause = next(c for c in schema["allOf"] if "toy-temperature" in c["if"]["properties"]["mechanism"]["enum"])
    assert clause["then"]["properties"]["params"] == {"propertyNames": {"enum": ["tau"]}, "allOf": [{"required": ["tau"]}]}
    assert "- `tau`" in spec.format_doc()


def test_the_toy_runs_and_verify_recomputes_its_steps(toy):
    ex = parse(EXAMPLE, "toy.toml")
    t = run(ex)
    e = np.array([1.0, 0.0, 0.7]) / 3.0  # q·k_j / τ
    np.testing.assert_allclose(t["weights"].value.numpy().ravel(), np.exp(e) / np.exp(e).sum(), rtol=0, atol=1e-12)
    env, path = mechanisms.path_for(ex)
    np.testing.assert_allclose(evaluate(path, env, "weights").numpy().ravel(), np.exp(e) / np.exp(e).sum(), atol=1e-12)
    # the scores written at one decimal (exact), the weights from those: rounding drift, found by the recomputation
    written = np.array([0.3, 0.0, 0.2])
    from_written = np.round(np.exp(written) / np.exp(written).sum(), 4)
    claims = ('[[claim]]\nstep = "scaled_scores"\nvalue = [0.3, 0.0, 0.2]\n'
              f'[[claim]]\nstep = "weights"\nvalue = [{", ".join(map(str, from_written))}]\n')
    verdicts = verify(parse(EXAMPLE + claims, "toy.toml"))
    assert [(v.step, v.status) for v in verdicts] == [("scaled_scores", EXACT), ("weights", DRIFT)]
    assert [v.status for v in verify(parse(EXAMPLE + '[[claim]]\nstep = "scores"\nvalue = [1.0, 0.0, 0.7]\n'))] == [EXACT]


def test_a_walkthrough_is_added_once(toy):
    with pytest.raises(ValueError) as e:
        mechanisms.add("toy-temperature", mechanisms.MECHANISMS["toy-temperature"])
    assert str(e.value) == "mechanism 'toy-temperature' has a walkthrough already"
    assert names.NAMES.count("toy-temperature") == 1
