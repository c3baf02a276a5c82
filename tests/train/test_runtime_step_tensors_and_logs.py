"""The training runtime's parts one by one: the optimizer step's global normalisation (two ranks
played by a stand-in world), a stand-in shard's zero weight, clipping, the mean over ranks; the
names of a training checkpoint's tensors and their round trip; the refusals in full; the progress
bar's settings and the TensorBoard tags of each record."""

from __future__ import annotations

import io

import pytest
import torch

from attnlab.distributed.ddp import World
from attnlab.train import runtime as R
from attnlab.train.checkpoint import CheckpointError
from attnlab.train.runtime import (
    Deadline,
    Progress,
    RunLog,
    Runtime,
    resolve_device,
    restore_training,
    training_tensors,
)


class TwoRanks(World):
    """Rank 0 of two, the other rank holding ``other`` of every summed quantity."""

    def __init__(self, other: float):
        super().__init__(0, 2, 0)
        self.other, self.summed = other, []

    def sum(self, x):
        self.summed.append(x)
        return x + self.other


def _lin(w):
    lin = torch.nn.Linear(2, 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([w], dtype=torch.float64))
    return lin


X = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)


def test_the_step_multiplies_by_the_ranks_and_divides_by_the_global_count():
    """loss = Σ_i w·x_i on this rank; 2 ranks, 3 items on the other: ∇ = 2 · Σ x_i / (2 + 3)."""
    lin = _lin([0.0, 0.0])
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    world = TwoRanks(3)
    total, n = Runtime(world=world).step(lin, opt, lambda: (lin(X).sum(), 2))
    assert n == 2 and world.summed == [2] and total.item() == 0.0 and not total.requires_grad
    assert lin.weight.detach()[0].tolist() == pytest.approx([-2 * 4.0 / 5, -2 * 1.0 / 5])


def test_a_stand_in_shard_counts_nothing_and_moves_nothing_by_itself():
    lin = _lin([1.0, 1.0])
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)
    world = TwoRanks(4)
    total, n = Runtime(world=world).step(lin, opt, lambda: (lin(X).sum(), 2), real=False)
    assert (total.item(), n) == (0.0, 0) and world.summed == [0]
    assert lin.weight.detach()[0].tolist() == [1.0, 1.0]  # zero gradient: SGD leaves it


def test_the_gradient_is_clipped_to_the_given_norm_only_when_asked():
    """Σ_i w·x_i over X, 2 items: ∇ = (4, 1)/2, norm √17/2; clip 1 scales it to (4, 1)/√17 (torch adds 1e-6 to the norm)."""
    for clip, want in ((0.0, [-2.0, -0.5]), (1.0, [-4 / 17**0.5, -1 / 17**0.5])):
        lin = _lin([0.0, 0.0])
        Runtime().step(
            lin,
            torch.optim.SGD(lin.parameters(), lr=1.0),
            lambda lin=lin: (lin(X).sum(), 2),
            clip=clip,
        )
        assert lin.weight.detach()[0].tolist() == pytest.approx(want, abs=1e-6), clip


def test_a_half_precision_sum_is_returned_in_float32():
    lin = torch.nn.Linear(2, 1)
    total, n = Runtime().step(
        lin,
        torch.optim.SGD(lin.parameters(), lr=0.1),
        lambda: (lin(X.float()).sum().to(torch.bfloat16), 2),
    )
    assert total.dtype == torch.float32 and n == 2


def test_the_mean_over_one_and_over_two_ranks():
    assert Runtime().mean(6.0, 4) == 1.5
    assert Runtime().mean(6.0, 0) == 6.0  # nothing counted: divided by one
    world = TwoRanks(2)
    assert Runtime(world=world).mean(6.0, 4) == pytest.approx(8.0 / 6)
    assert world.summed == [6.0, 4]
    assert Runtime(world=TwoRanks(0)).mean(3.0, 0) == 3.0  # a global count of zero: divided by one


def test_the_runtime_defaults_and_refusals_in_full(monkeypatch):
    rt = Runtime()
    assert (rt.device, rt.precision, rt.world.size, rt.is_main) == (
        torch.device("cpu"),
        "fp32",
        1,
        True,
    )
    assert R.DEVICES == ("auto", "cpu", "cuda", "mps") and R.PRECISIONS == ("fp32", "bf16")
    with pytest.raises(ValueError) as e:
        Runtime.create("cpu", "fp16")
    assert str(e.value) == "precision must be one of fp32, bf16; got 'fp16'"
    made = Runtime.create("cpu", "bf16")
    assert (made.device, made.precision, made.world.size) == (torch.device("cpu"), "bf16", 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Runtime.create().device == torch.device("cpu") and Runtime.create().precision == "fp32"
    assert (
        Runtime.local().device == torch.device("cpu")
        and Runtime.local("cpu", "bf16").precision == "bf16"
    )
    assert resolve_device() == torch.device("cpu")
    given = torch.device("meta")
    assert resolve_device(given) is given  # a device passes as it is
    with pytest.raises(ValueError) as e:
        resolve_device("cuda")
    assert str(e.value) == (
        "--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); "
        "use --device cpu or auto"
    )
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError) as e:
        resolve_device("mps")
    assert (
        str(e.value)
        == "--device mps: no Apple MPS device is available here; use --device cpu or auto"
    )
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("mps") == torch.device("mps")


def test_prepare_and_to_put_the_model_and_tensors_on_the_device():
    rt = Runtime(device=torch.device("meta"))
    lin = torch.nn.Linear(2, 2)
    assert rt.prepare(lin) is lin and lin.weight.device.type == "meta"  # one process: not wrapped
    a, b = rt.to(torch.ones(1), torch.zeros(2))
    assert a.device.type == b.device.type == "meta" and a.shape == (1,) and b.shape == (2,)


class _IntState(torch.optim.SGD):
    """SGD that also counts its steps in a plain int in the state (saved as a tensor)."""

    def step(self, closure=None):
        super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                self.state[p]["n"] = self.state[p].get("n", 0) + 1


def test_a_training_checkpoints_tensor_names_and_their_round_trip():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    t = training_tensors(model, opt)
    assert sorted(t) == sorted(
        [
            "model.weight",
            "model.bias",
            "optim.0.step",
            "optim.0.exp_avg",
            "optim.0.exp_avg_sq",
            "optim.1.step",
            "optim.1.exp_avg",
            "optim.1.exp_avg_sq",
            "rng.torch",
        ]
    )
    assert torch.equal(t["model.weight"], model.weight) and torch.equal(
        t["rng.torch"], torch.get_rng_state()
    )
    assert torch.equal(t["optim.1.exp_avg"], opt.state[model.bias]["exp_avg"])
    # into a fresh model and optimizer whose learning rate stays its own
    torch.manual_seed(1)
    twin = torch.nn.Linear(2, 1)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=0.5)
    torch.rand(3)
    restore_training(twin, twin_opt, t, "run")
    assert torch.equal(twin.weight, model.weight) and torch.equal(twin.bias, model.bias)
    assert torch.equal(
        twin_opt.state[twin.weight]["exp_avg_sq"], opt.state[model.weight]["exp_avg_sq"]
    )
    assert float(twin_opt.state[twin.bias]["step"]) == 1.0 and twin_opt.param_groups[0]["lr"] == 0.5
    assert torch.equal(torch.get_rng_state(), t["rng.torch"])  # the generator put back

    plain = torch.nn.Linear(1, 1)
    sgd = _IntState(plain.parameters(), lr=0.1)
    plain(torch.ones(1, 1)).sum().backward()
    sgd.step()
    t = training_tensors(plain, sgd)
    assert t["optim.0.n"].dtype == torch.int64 and int(t["optim.0.n"]) == 1


def test_weights_that_do_not_fit_are_one_line_naming_the_checkpoint():
    t = training_tensors(
        torch.nn.Linear(2, 1), torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    )
    model = torch.nn.Linear(3, 1)
    with pytest.raises(CheckpointError) as e:
        restore_training(model, torch.optim.SGD(model.parameters(), lr=0.1), t, "runs/x")
    msg = str(e.value)
    assert msg.startswith(
        "the weights in runs/x do not fit the model its config.json describes: Error(s) in loading"
    )
    assert "\n" not in msg
    t.pop("model.bias")
    with pytest.raises(
        CheckpointError, match="^the weights in runs/x do not fit"
    ):  # strictly: a key missing
        restore_training(
            torch.nn.Linear(2, 1), torch.optim.SGD(model.parameters(), lr=0.1), t, "runs/x"
        )


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_starts_where_a_resumed_run_is_and_shows_the_loss_to_four_digits():
    tty = _Tty()
    p = Progress(40, initial=10, stream=tty)
    assert (
        p.tty
        and p.bar.n == 10
        and p.bar.total == 40
        and p.bar.unit == "step"
        and p.bar.desc == "train"
    )
    assert p.bar.leave is True and p.bar.dynamic_ncols
    p.update(12, loss=1.234567, tok=98766.0)
    assert p.bar.n == 12 and p.bar.postfix == "loss=1.235, tok=9.877e+04"
    p.update(13)  # no values: the postfix stays
    assert p.bar.postfix == "loss=1.235, tok=9.877e+04"
    p.close()
    assert p.bar is None
    p.close()  # closing twice is fine
    off = Progress(5, stream=_Tty(), enabled=False)
    assert (off.tty, off.bar) == (False, None)
    plain = Progress(5, stream=io.StringIO())
    assert (plain.tty, plain.bar, plain.enabled) == (False, None, True)


def test_progress_lines_go_to_stderr_by_default(capsys):
    p = Progress(3)
    p.line("hello")
    p.close()
    assert capsys.readouterr().err == "hello\n"


class _Writer:
    def __init__(self):
        self.scalars, self.flushes, self.closed = [], 0, False

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        self.flushes += 1

    def close(self):
        self.closed = True


def test_each_number_of_a_record_becomes_a_train_or_valid_scalar(tmp_path):
    log = RunLog(tensorboard=tmp_path)
    w = log._writer = _Writer()
    log.add(
        {
            "step": 4,
            "loss": 2.5,
            "tokens_per_s": 100,
            "valid_loss": 3.0,
            "valid_exact": 50.0,
            "flag": True,
            "note": "x",
            "lr": None,
        }
    )
    assert w.scalars == [
        ("train/loss", 2.5, 4),
        ("train/tokens_per_s", 100, 4),
        ("valid/loss", 3.0, 4),
        ("valid/exact", 50.0, 4),
    ]
    assert w.flushes == 1 and log.records[-1]["note"] == "x"
    log.add({"step": 5.0, "val_loss": 1.0})  # not "valid_": a train scalar; the step as an int
    assert w.scalars[-1] == ("train/val_loss", 1.0, 5) and type(w.scalars[-1][2]) is int
    log.close()
    assert w.closed and log._writer is None
    log.close()
    bare = RunLog()
    bare.add({"step": 1, "loss": 1.0})
    assert (
        bare.records == [{"step": 1, "loss": 1.0}]
        and bare._writer is None
        and bare.tensorboard is None
    )


def test_the_deadline_never_falls_due_without_a_budget_and_asks_every_rank(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(R.time, "perf_counter", lambda: clock[0])
    assert Deadline(None, 0.0).due(1e9) is False
    d = Deadline(10.0, 100.0)
    assert d.tail == {}
    clock[0] = 105.0
    assert d.due(4.0) is False  # 5 + 4 = 9 ≤ 10
    d.took("save", 1.0)
    assert d.due(4.0) is False  # exactly 10: still within
    d.took("eval", 0.5)
    assert d.due(4.0) is True
    d.took("eval", 0.0)  # the latest time replaces the earlier one
    assert d.due(4.0) is False
    world = TwoRanks(1)  # the other rank is due
    assert d.due(4.0, world) is True and world.summed == [0]
    assert d.due(4.0, TwoRanks(0)) is False
    assert d.due(4.5, World()) is True  # one process: no collective
