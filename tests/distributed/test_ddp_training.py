"""Data-parallel training through torchrun: two gloo processes against one process.

Each test starts ``python -m torch.distributed.run --nproc-per-node 2 -m attnlab train ...``
(torchrun, exactly as a user would) and one plain ``attnlab train ...`` with the same
global batch, and compares what they wrote: the per-step losses of ``metrics.jsonl`` and
the weights of ``model.safetensors``. Two processes with batch B/2 each must take the same
steps as one process with batch B (the loss is normalised by the global token count).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from training_runs import same_lm_weights, weights

pytestmark = [pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available"),
              pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds torchrun's workers through /proc")]

SMALL = ["--data", "numbers-de-en", "--numbers", "400", "--batch-size", "16", "--log-every", "1", "--eval-every", "0",
         "--hidden", "32", "--emb", "16", "--attn-dim", "32", "--device", "cpu", "--quiet"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _torchrun(args: list[str], nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port", str(_port()),
            "-m", "attnlab", *args]


def _one(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "attnlab", *args]


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"


def _losses(run: Path) -> dict[int, float]:
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
        elif "train_loss" in rec:
            out[rec["step"]] = rec["train_loss"]
    return out


def test_seq2seq_two_processes_with_half_batches_take_the_steps_of_one(tmp_path):
    args = ["train", "seq2seq", *SMALL, "--steps", "5", "--save-every", "0"]
    _run(_torchrun([*args, "--out", str(tmp_path / "two")]))
    _run(_one([*args, "--out", str(tmp_path / "one")]))
    two, one = _losses(tmp_path / "two"), _losses(tmp_path / "one")
    assert sorted(two) == sorted(one) == [1, 2, 3, 4, 5]
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=1e-5), step
    assert one[5] < one[1]  # it trains
    w2, w1 = weights(tmp_path / "two"), weights(tmp_path / "one")
    assert w2.keys() == w1.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], atol=1e-5, rtol=1e-4, msg=k)
    assert not (tmp_path / "two" / "tensorboard").exists()


def test_lm_two_processes_with_half_batches_take_the_steps_of_one_and_one_process_resumes(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"line {i}: the cat sat on the mat, {i * 7 % 13} times.\n" for i in range(200)))
    args = ["train", "lm", "--text", str(text), "--batch-size", "8", "--block-size", "32", "--dim", "32",
            "--num-layers", "1", "--eval-every", "1", "--eval-batches", "1", "--device", "cpu"]
    _run(_torchrun([*args, "--steps", "4", "--out", str(tmp_path / "two")]))
    _run(_one([*args, "--steps", "4", "--out", str(tmp_path / "one")]))
    two, one = _losses(tmp_path / "two"), _losses(tmp_path / "one")
    assert sorted(one) == [1, 2, 3, 4]
    for step in one:  # metrics.jsonl rounds the LM's losses to 4 decimals
        assert two[step] == pytest.approx(one[step], abs=2e-4), step
    w1 = weights(tmp_path / "one")
    assert any(k.startswith("model.blocks.") for k in w1)
    same_lm_weights(weights(tmp_path / "two"), w1, dim=32)
    # two processes for 2 steps, then one process resumes to 4: the weights of the 4-step run
    _run(_torchrun([*args, "--steps", "2", "--out", str(tmp_path / "half")]))
    _run(_one(["train", "lm", "--text", str(text), "--out", str(tmp_path / "half"), "--resume", "--steps", "4",
               "--device", "cpu"]))
    same_lm_weights(weights(tmp_path / "half"), w1, dim=32)
    assert sorted(_losses(tmp_path / "half")) == [1, 2, 3, 4]


def _kill_all(proc: subprocess.Popen, marker: str) -> None:
    """SIGKILL torchrun and its workers (they run in sessions of their own, so find them by their
    command line, which names the run folder)."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for _ in range(50):
        alive = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and int(pid) != os.getpid():
                alive.append(int(pid))
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not alive:
            return
        time.sleep(0.1)
    raise AssertionError(f"workers of {marker} still alive")


def test_a_killed_two_process_run_resumes_in_one_process(tmp_path):
    """Kill a two-process run (SIGKILL to torchrun's process group) after its first checkpoint,
    resume it with one process, and land on the weights of an uninterrupted one-process run."""
    run = tmp_path / "killed"
    cmd = _torchrun(["train", "seq2seq", *SMALL, "--steps", "100000", "--save-every", "3", "--out", str(run)])
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    saved, deadline = 0, time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            cfg = run / "config.json"
            if cfg.exists():
                try:
                    saved = json.loads(cfg.read_text())["state"]["step"]
                except (json.JSONDecodeError, KeyError):
                    saved = 0  # being swapped in: read it again
                if saved >= 3:
                    break
            time.sleep(0.05)
    finally:
        _kill_all(proc, str(run))
    assert saved >= 3, f"no checkpoint within the deadline; torchrun said: {proc.stderr.read().decode()[-2000:]}"
    state = json.loads((run / "config.json").read_text())["state"]["step"]  # what is on disk now
    total = state + 3
    _run(_one(["train", "seq2seq", "--out", str(run), "--resume", "--steps", str(total), "--quiet", "--device", "cpu"]))
    _run(_one(["train", "seq2seq", *SMALL, "--steps", str(total), "--save-every", "0", "--out", str(tmp_path / "whole")]))
    resumed, whole = weights(run), weights(tmp_path / "whole")
    assert json.loads((run / "config.json").read_text())["state"]["step"] == total
    for k in whole:
        if k.startswith("model."):
            torch.testing.assert_close(resumed[k], whole[k], atol=1e-5, rtol=1e-4, msg=k)
    losses_resumed, losses_whole = _losses(run), _losses(tmp_path / "whole")
    for step in range(1, total + 1):
        assert losses_resumed[step] == pytest.approx(losses_whole[step], abs=1e-5), step
