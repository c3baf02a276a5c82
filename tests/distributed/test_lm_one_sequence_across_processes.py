"""``train lm --context-parallel 2`` under torchrun: each window split across two gloo processes
(zigzag, or contiguous under rotary positions), each rank attending over the whole window through
the ring (or Ulysses). The reference is one plain process training the same model on the same
windows: the per-step losses of ``metrics.jsonl``, the validation losses and the weights of
``model.safetensors`` must agree, and a one-process resume continues a two-process run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from training_runs import same_lm_weights, weights

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")

DIM = 32


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd: list[str], ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=240)
    if ok:
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    return r


def _torchrun(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_port()),
            "-m", "attnlab", *args]


def _records(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "train_loss" in r}


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("text") / "t.txt"
    path.write_text("".join(f"line {i}: the cat sat on the mat, {i * 7 % 13} times.\n" for i in range(200)))
    return path


def _args(text: Path, *more: str) -> list[str]:
    return ["train", "lm", "--text", str(text), "--batch-size", "4", "--block-size", "32", "--dim", str(DIM),
            "--num-layers", "2", "--eval-every", "1", "--eval-batches", "1", "--device", "cpu", *more]


@pytest.mark.parametrize("more", [[], ["--cp-mode", "ulysses"], ["--positional", "rope"]], ids=["ring-zigzag", "ulysses-zigzag", "ring-rope-contiguous"])
def test_two_processes_sharing_each_window_take_the_steps_of_one(tmp_path, text, more):
    _run(_torchrun(_args(text, "--steps", "4", "--context-parallel", "2", *more, "--out", str(tmp_path / "two"))))
    _run([sys.executable, "-m", "attnlab", *_args(text, "--steps", "4", *more, "--out", str(tmp_path / "one"))])
    two, one = _records(tmp_path / "two"), _records(tmp_path / "one")
    assert sorted(one) == sorted(two) == [1, 2, 3, 4]
    for step in one:  # metrics.jsonl rounds the losses to 4 decimals
        assert two[step]["train_loss"] == pytest.approx(one[step]["train_loss"], abs=2e-4), step
        assert two[step]["val_loss"] == pytest.approx(one[step]["val_loss"], abs=2e-4, nan_ok=True), step
    assert one[4]["train_loss"] < one[1]["train_loss"]  # it trains
    same_lm_weights(weights(tmp_path / "two"), weights(tmp_path / "one"), DIM)
    config = json.loads((tmp_path / "two" / "config.json").read_text())
    assert config["train"]["context_parallel"] == 2


def test_one_process_resumes_a_run_that_split_its_windows(tmp_path, text):
    _run([sys.executable, "-m", "attnlab", *_args(text, "--steps", "4", "--out", str(tmp_path / "one"))])
    _run(_torchrun(_args(text, "--steps", "2", "--context-parallel", "2", "--out", str(tmp_path / "half"))))
    _run([sys.executable, "-m", "attnlab", "train", "lm", "--text", str(text), "--out", str(tmp_path / "half"),
          "--resume", "--steps", "4", "--context-parallel", "1", "--device", "cpu"])
    same_lm_weights(weights(tmp_path / "half"), weights(tmp_path / "one"), DIM)


def test_a_split_the_processes_cannot_make_is_one_line(tmp_path, text):
    alone = _run([sys.executable, "-m", "attnlab", *_args(text, "--steps", "1", "--context-parallel", "2",
                                                          "--out", str(tmp_path / "a"))], ok=False)
    assert alone.returncode == 2 and len(alone.stderr.strip().splitlines()) == 1, alone.stderr
    assert "context_parallel=2 splits each window across all processes" in alone.stderr
    assert "got 1 process(es)" in alone.stderr
    odd = _run([sys.executable, "-m", "attnlab", *_args(text, "--steps", "1", "--context-parallel", "2",
                                                        "--block-size", "30", "--out", str(tmp_path / "b"))], ok=False)
    assert odd.returncode == 2 and "block_size=30 does not split across context_parallel=2 processes: it must be " \
        "divisible by 4" in odd.stderr, odd.stderr
