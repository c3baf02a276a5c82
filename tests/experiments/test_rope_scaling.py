"""The RoPE-scaling experiment in its quick form: it runs, evaluates every method at every length on
the same windows, writes its table, JSON and plot whole, and restores the model's rotary modules."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnlab.cli import main
from attnlab.experiments.rope_scaling import METHODS, RopeScalingConfig, _set_rotary, run, table
from attnlab.models.gpt import GPT, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
        "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles. ") * 12


def test_quick_run_writes_table_json_and_plot(tmp_path):
    cfg = RopeScalingConfig.quick()
    res = run(cfg, tmp_path, text=TEXT)
    assert list(res["methods"]) == list(METHODS)
    for row in res["methods"].values():
        assert set(row) == {"16", "32", "64"} and all(v > 0 for v in row.values())
    # at the trained length, dynamic NTK is the identity: the same loss as plain rope
    assert res["methods"]["dynamic"]["16"] == res["methods"]["rope"]["16"]
    assert json.loads((tmp_path / "results.json").read_text()) == res
    assert (tmp_path / "table.md").read_text() == table(res)
    assert (tmp_path / "rope_scaling.png").stat().st_size > 1000
    # no half-written leftovers; the folder's marker lists what the run wrote
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".attnlab-files"]
    assert json.loads((tmp_path / ".attnlab-files").read_text()) == {"files": ["results.json", "rope_scaling.png", "table.md"]}


def test_set_rotary_swaps_the_scaling_of_every_layer():
    model = GPT(GPTConfig(vocab_size=10, block_size=8, dim=16, num_layers=2, num_heads=2, positional="rope"))
    cfg = RopeScalingConfig(block_size=8, factor=2.0)
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # d_h = 8: θ_i = 10000^(-2i/8)
    _set_rotary(model, "linear", cfg)
    for block in model.blocks:
        torch.testing.assert_close(block.self_attn.rotary.inv_freq.double(), theta / 2)
    # llama3 (low 1, high 4, L = 8): γ_i = clamp((L/λ_i − 1) / (4 − 1), 0, 1) with λ_i = 2π/θ_i;
    # θ'_i = (1 − γ_i) θ_i / s + γ_i θ_i
    _set_rotary(model, "llama3", cfg)
    gamma = ((8 * theta / (2 * math.pi) - 1) / 3).clamp(0, 1)
    for block in model.blocks:
        torch.testing.assert_close(block.self_attn.rotary.inv_freq.double(), (1 - gamma) * theta / 2 + gamma * theta)
    # longrope beyond L: factors ramp 1, 4/3, 5/3, 2 over the four frequencies
    _set_rotary(model, "longrope", cfg)
    rotary = model.blocks[0].self_attn.rotary
    assert rotary.scaling["short_factor"] == [1.0] * 4
    assert rotary.scaling["long_factor"] == pytest.approx([1.0, 4 / 3, 5 / 3, 2.0])
    _set_rotary(model, None)
    assert model.blocks[0].self_attn.rotary.scaling is None


def test_cli_rejects_bad_methods(capsys):
    assert main(["experiment", "rope-scaling", "--quick", "--methods", "rope,bogus"]) == 2
    err = capsys.readouterr().err
    assert "--methods" in err and "Traceback" not in err


def test_cli_prints_the_table_of_the_results(tmp_path, capsys, monkeypatch):
    import attnlab.experiments.rope_scaling as rs

    results = {"config": {"lengths": [16, 32], "block_size": 16, "factor": 2.0},
               "methods": {"rope": {"16": 1.23456, "32": 2.5}, "alibi": {"16": 1.0, "32": 1.0004}}}
    seen = []
    monkeypatch.setattr(rs, "run", lambda cfg, out, progress: seen.append((cfg.methods, out, progress)) or results)
    assert main(["experiment", "rope-scaling", "--quick", "--methods", "rope,alibi", "--out", str(tmp_path),
                 "--quiet"]) == 0
    assert seen == [(("rope", "alibi"), str(tmp_path), False)]
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["| method (trained at L = 16, s = 2) | n = 16 | n = 32 |",
                         "|---|---:|---:|",
                         "| rope | 1.235 | 2.500 |",
                         "| alibi | 1.000 | 1.000 |"]
    assert lines[4].startswith("(validation loss, nats per character; ") and lines[4].endswith(f"written to {tmp_path})")
