"""``attnlab interpret rollout|flow --json``: the printed matrix against hand-worked values, the picture,
and bad input (exit 2, one line)."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main

# 2 layers, 1 head, 3 tokens; rollout with the residual worked out in tests/interpret/test_rollout.py:
# Â1 = [[1,0,0],[.5,.5,0],[0,.5,.5]], Â2 = [[1,0,0],[0,1,0],[.5,0,.5]], R = Â2 Â1 → row 2 = [.5, .25, .25]
LAYERS = [[[[1, 0, 0], [1, 0, 0], [0, 1, 0]]], [[[1, 0, 0], [0, 1, 0], [1, 0, 0]]]]


def rows(out: str) -> list[list[float]]:
    return [[float(v) for v in line.split()[1:]] for line in out.splitlines()[1:4]]


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"tokens": ["a", " b", "\n"], "layers": LAYERS}))
    return str(path)


def test_rollout_prints_the_matrix_and_draws_it(capsys, weights, tmp_path):
    pic = tmp_path / "r.png"
    assert main(["interpret", "rollout", "--json", weights, "--picture", str(pic)]) == 0
    out = capsys.readouterr().out
    assert rows(out) == [[1, 0, 0], [0.5, 0.5, 0], [0.5, 0.25, 0.25]]
    assert "␣b" in out and "\\n" in out  # whitespace tokens shown visibly
    assert pic.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_flow_without_residual(capsys, weights):
    # no residual: flow (2, i) → (0, k) = Σ_j min(A2[i, j], A1[j, k]); A2's rows are one-hot (j = 0, 1, 0),
    # so row i is A1[j]: A1[0] = A1[1] = [1, 0, 0]
    assert main(["interpret", "flow", "--json", weights, "--no-residual"]) == 0
    assert rows(capsys.readouterr().out) == [[1, 0, 0]] * 3


@pytest.mark.parametrize("content, says", [
    ("not json", "not JSON"),
    ('{"tokens": ["a"]}', '"layers"'),
    ('{"tokens": ["a", "b"], "layers": [[[[1, 0]]]]}', "2 × 2"),
    ('{"tokens": ["a"], "layers": [[[[1]], [[1, 2]]]]}', "regular"),
    ('{"tokens": ["a"], "layers": [[[[-1]]]]}', ">= 0"),
    ('{"tokens": ["a"], "layers": [[[[NaN]]]]}', "finite"),
])
def test_bad_json_is_one_line_exit_2(capsys, tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["interpret", "rollout", "--json", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_flow_refuses_long_inputs_and_bad_picture(capsys, tmp_path, weights):
    path = tmp_path / "long.json"
    n = 65
    path.write_text(json.dumps({"tokens": ["t"] * n, "layers": [[[[1 / n] * n] * n]]}))
    assert main(["interpret", "flow", "--json", str(path)]) == 2
    assert "rollout" in capsys.readouterr().err
    assert main(["interpret", "rollout", "--json", weights, "--picture", "x.jpg"]) == 2
    assert main(["interpret", "rollout", "--json", str(tmp_path / "missing.json")]) == 2
