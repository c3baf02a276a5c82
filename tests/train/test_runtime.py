"""The training runtime: devices, precision, the shared optimizer step, RNG states, progress and TensorBoard."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from attnlab.cli import main
from attnlab.train.runtime import (
    Progress,
    Runtime,
    device_of,
    resolve_device,
    restore_rng,
    rng_tensors,
)

SMALL = ["train", "seq2seq", "--data", "numbers-de-en", "--numbers", "300", "--batch-size", "16", "--log-every", "1",
         "--eval-every", "0", "--save-every", "0", "--hidden", "24", "--emb", "8", "--attn-dim", "16", "--quiet"]


def test_auto_is_cuda_when_present_else_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cpu") == torch.device("cpu")


def test_a_device_that_is_not_here_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="--device cuda: no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match=r"one of auto, cpu, cuda, mps; got 'tpu'"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cli_device_cuda_without_cuda_exits_2_with_one_line(tmp_path, capsys):
    assert main([*SMALL, "--steps", "1", "--device", "cuda", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0]
    assert not (tmp_path / "r").exists()


def test_step_normalises_by_the_global_count():
    """SGD(lr=1) on loss Σ_i (w·x_i − y_i)² / n: the step equals −∇ computed by hand."""
    x = np.array([[1.0, 2.0], [0.5, -1.0], [3.0, 0.0]])
    y = np.array([1.0, 0.0, 2.0])
    w0 = np.array([0.3, -0.2])
    grad = 2 * ((x @ w0 - y)[:, None] * x).sum(0) / len(y)
    lin = torch.nn.Linear(2, 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(w0)[None])
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    xt, yt = torch.tensor(x), torch.tensor(y)
    total, n = Runtime().step(lin, opt, lambda: (((lin(xt)[:, 0] - yt) ** 2).sum(), 3))
    np.testing.assert_allclose(lin.weight.detach().numpy()[0], w0 - grad, rtol=1e-12)
    assert n == 3 and total.item() == pytest.approx(((x @ w0 - y) ** 2).sum())


def test_bf16_autocasts_the_forward_and_fp32_does_not():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with Runtime(precision="bf16").autocast():
        assert lin(x).dtype == torch.bfloat16
    with Runtime(precision="fp32").autocast():
        assert lin(x).dtype == torch.float32
    with pytest.raises(ValueError, match="fp32, bf16; got 'fp16'"):
        Runtime(precision="fp16")


def test_bf16_training_follows_fp32(tmp_path):
    for p in ("fp32", "bf16"):
        assert main([*SMALL, "--steps", "4", "--precision", p, "--device", "cpu", "--out", str(tmp_path / p)]) == 0
    records = {p: [json.loads(line) for line in (tmp_path / p / "metrics.jsonl").read_text().splitlines()]
               for p in ("fp32", "bf16")}
    loss = {p: [r["loss"] for r in rs if "loss" in r] for p, rs in records.items()}
    assert len(loss["bf16"]) == 4
    assert loss["bf16"] != loss["fp32"]  # it really ran in bfloat16
    np.testing.assert_allclose(loss["bf16"], loss["fp32"], atol=0.05)


def test_rng_states_round_trip_and_a_cuda_state_is_skipped_without_cuda(monkeypatch):
    states = rng_tensors()
    a = torch.rand(5)
    torch.rand(3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    skipped = restore_rng({**states, "rng.cuda.0": torch.zeros(16, dtype=torch.uint8)})
    assert skipped == ["rng.cuda.0"]
    assert torch.equal(torch.rand(5), a)


def test_device_of():
    assert device_of(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert device_of(torch.nn.ReLU()) == torch.device("cpu")
    assert device_of(object()) == torch.device("cpu")


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere():
    plain = io.StringIO()
    p = Progress(10, stream=plain)
    p.update(5, loss=1.25)
    p.line("validation 1")
    p.close()
    assert plain.getvalue() == "validation 1\n"
    tty = _Tty()
    p = Progress(10, stream=tty, desc="train")
    for s in range(1, 11):
        p.update(s, loss=0.5)
    p.line("validation 2")
    p.close()
    out = tty.getvalue()
    assert "train" in out and "10/10" in out and "step/s" in out and "loss=0.5" in out and "validation 2" in out
    quiet = _Tty()
    p = Progress(10, stream=quiet, enabled=False)
    p.update(3)
    p.line("x")
    p.close()
    assert quiet.getvalue() == ""


def test_tensorboard_events_hold_the_run_logs_losses(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "r"
    # a checkpoint at every step: each save carries the event files into the new folder
    assert main([*SMALL, "--steps", "3", "--save-every", "1", "--device", "cpu", "--tensorboard", "--out", str(out)]) == 0
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    events = acc.Scalars("train/loss")
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e.step for e in events] == [r["step"] for r in logged if "loss" in r] == [1, 2, 3]
    np.testing.assert_allclose([e.value for e in events], [r["loss"] for r in logged if "loss" in r], rtol=1e-6)
    assert "valid/loss" in acc.Tags()["scalars"]


def test_progress_iter_yields_the_items_with_a_bar_only_on_a_terminal():
    from attnlab.train.runtime import progress_iter

    plain, tty = io.StringIO(), _Tty()
    assert list(progress_iter(range(4), desc="decode", stream=plain)) == [0, 1, 2, 3]
    assert plain.getvalue() == ""
    assert list(progress_iter(range(4), desc="decode", stream=tty, total=4)) == [0, 1, 2, 3]
    assert "decode:" in tty.getvalue() and "/4 [" in tty.getvalue()  # the bar (cleared at the end: leave=False)


def test_an_experiments_progress_lines_name_their_model(tmp_path, capsys):
    """Off a terminal, each training's lines say which model they belong to (make demo's stage 4)."""
    assert main(["experiment", "bottleneck", "--quick", "--models", "none,luong", "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err.splitlines()
    steps = [line for line in err if ": step " in line]
    assert steps and {line.split(":")[0] for line in steps} == {"none", "luong"}
