"""Traces record the reference path's steps; the walkthroughs of the tutorials' examples read them."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import attnlab
from attnlab.cli import main
from attnlab.explain import load, run, verify


def test_trace_records_named_steps_with_formulas():
    q, k = torch.randn(1, 2, 4), torch.randn(1, 3, 4)
    mask = torch.tensor([[True, False, True], [False, False, True]])
    with attnlab.trace() as t:
        out, w = attnlab.attention(q, k, k, mask=mask)
    assert t.names() == ["scores", "scaled_scores", "masked_scores", "weights", "context"]
    assert all(s.formula for s in t)
    torch.testing.assert_close(t["scaled_scores"].value, t["scores"].value / 2)
    assert torch.isinf(t["masked_scores"].value[0, 0, 1])
    assert "3 of 6 scores masked" in t["masked_scores"].note
    torch.testing.assert_close(t["context"].value, out)
    assert w is None  # weights were not asked for, but the trace has them
    torch.testing.assert_close(t["weights"].value.sum(-1), torch.ones(1, 2))
    with pytest.raises(KeyError, match="recorded steps"):
        t["tanh"]


def test_no_trace_outside_the_block():
    with attnlab.trace() as t:
        pass
    attnlab.attention(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    assert len(t) == 0


def test_seed_000_walkthrough_numbers_come_from_the_trace():
    ex = load("tutorial1-additive")
    tr = run(ex)
    np.testing.assert_allclose(tr["scores"].value[0].numpy(), [1.5267, 0.9687, 0.8797], atol=1e-4)
    checks = {c.where(): c.ok for c in verify(ex, tr)}
    assert checks["scores[2]"] is False  # the text's 1.32
    assert checks["weights"] is False and checks["context"] is False
    assert checks["projected_query"] is True and checks["preactivation[1]"] is True


def test_seed_001_self_attention_argmax_claim_is_wrong():
    ex = load("tutorial2-self-attention")
    (argmax,) = [c for c in verify(ex, run(ex)) if c.relation == "argmax"]
    assert argmax.claimed == 4 and argmax.true == 5 and not argmax.ok


def test_cli_explain_prints_the_steps(capsys):
    assert main(["explain", "additive", "--example", "tutorial1-additive", "--digits", "3"]) == 0
    out = capsys.readouterr().out
    for text in ["Step 5. scores", "[1.527  0.969  0.880]", "[0.477  0.273  0.250]", "✗ WRONG  scores[2] = 1.32"]:
        assert text in out
    assert main(["explain", "scaled_dot", "--example", "tutorial2-self-attention"]) == 0
    assert "true: position 5" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["explain", "nonsense"], "unknown mechanism 'nonsense'"),
        (["explain", "dot", "--example", "tutorial1-additive"], "is a 'bahdanau' example, not 'dot'"),
        (["explain", "additive", "--example", "nope"], "no built-in example 'nope'"),
        (["explain", "additive", "--file", "missing.toml"], "no such file"),
    ],
)
def test_cli_explain_bad_input(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match(r"attnlab [\w ]+: error:", err) and words in err


def test_malformed_example_file(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('mechanism = "additive"\n[inputs]\nquery = [1, 2]\nkeys = [[1, 2], [3]]\n')
    assert main(["explain", "additive", "--file", str(f)]) == 2
    assert "keys" in capsys.readouterr().err
    f.write_text("mechanism = \n")
    assert main(["explain", "additive", "--file", str(f)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    f.write_text('mechanism = "additive"\n[inputs]\nquery = [1, 2]\nkeys = [[1, 2]]\n[params]\nw_q = [[1, 0], [0, 1]]\n')
    assert main(["explain", "additive", "--file", str(f)]) == 2
    err = capsys.readouterr().err
    assert "[params]" in err and "w_k" in err


def test_command_line_entry_point_runs():
    r = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "explain", "dot", "--example", "tutorial2-luong-dot"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "[17.0000  39.0000]" in r.stdout
