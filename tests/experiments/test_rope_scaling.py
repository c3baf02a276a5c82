"""The RoPE-scaling experiment in its quick form: it runs, evaluates every method at every length on
the same windows, writes its table, JSON and plot whole, and restores the model's rotary modules."""

from __future__ import annotations

import json

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
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written leftovers


def test_set_rotary_swaps_the_scaling_of_every_layer():
    model = GPT(GPTConfig(vocab_size=10, block_size=8, dim=16, num_layers=2, num_heads=2, positional="rope"))
    _set_rotary(model, {"type": "linear", "factor": 2.0})
    for block in model.blocks:
        torch.testing.assert_close(block.self_attn.rotary.inv_freq, 10000.0 ** (-torch.arange(0, 8, 2) / 8) / 2)


def test_cli_rejects_bad_methods(capsys):
    assert main(["experiment", "rope-scaling", "--quick", "--methods", "rope,bogus"]) == 2
    err = capsys.readouterr().err
    assert "--methods" in err and "Traceback" not in err
