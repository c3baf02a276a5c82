"""Where and how a training run computes: device, precision, processes, the step, progress and logs.

The one training loop (``train.fit``) runs every task (translation ``train.loop``, language model
``train.lm``, captioner ``train.caption``); where and how it computes is here, once, so that each
flag means the same in every ``attnlab train`` command:

* ``--device auto|cpu|cuda|mps`` (``resolve_device``; auto = CUDA when present, else CPU);
* ``--precision fp32|bf16`` (``Runtime.autocast``: ``torch.autocast`` with bfloat16 around
  the forward and the loss; the backward and the optimizer stay in float32);
* processes: ``torchrun --nproc-per-node N -m attnlab train ...`` (``attnlab.distributed.World``):
  every rank draws the same *global* batch and trains on its shard, DDP averages gradients;
* ``Runtime.step``: one optimizer step whose loss is normalised by the *global* count of
  tokens, so N processes with batch B/N take the same step as one process with batch B:

      loss_r = Σ_{i ∈ shard r} ℓ_i · N / Σ_r |shard r|      (DDP averages ∇loss_r over the N ranks)
      ⇒ (1/N) Σ_r ∇loss_r = ∇ (Σ_i ℓ_i / Σ_r |shard r|)        the one-process loss

* ``Runtime.local``: the same device and precision, one process, for the verbs that run a
  trained model (``generate``, ``translate``, ``evaluate``, ``caption``, ``interpret heads``, ``view --hf``);
* RNG: ``rng_tensors`` / ``restore_rng`` put the CPU and every CUDA generator's state in the
  checkpoint; a state for a device this machine lacks is skipped, so a run resumes on another device;
* ``Progress``: a tqdm bar with rate and ETA on a terminal, plain lines otherwise, nothing on ranks > 0;
* ``RunLog``: ``metrics.jsonl`` records (``train.runlog``) and, with ``--tensorboard``, the same
  scalars as TensorBoard events in ``OUT/tensorboard/`` (rank 0 only).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..distributed.ddp import World
from .checkpoint import CheckpointError

DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("fp32", "bf16")


def resolve_device(name: str | torch.device = "auto", local_rank: int = 0) -> torch.device:
    """``auto`` → ``cuda:local_rank`` when CUDA is present, else ``cpu``; a named device must exist."""
    if isinstance(name, torch.device):
        return name
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA device is available here (torch.cuda.is_available() is False); "
                             "use --device cpu or auto")
        return torch.device("cuda", local_rank)
    if name == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ValueError("--device mps: no Apple MPS device is available here; use --device cpu or auto")
    return torch.device(name)


def device_of(model) -> torch.device:
    """Where ``model``'s parameters live (CPU for a model without parameters)."""
    params = getattr(model, "parameters", None)
    p = next(iter(params()), None) if callable(params) else None
    return p.device if p is not None else torch.device("cpu")


def rng_tensors() -> dict[str, torch.Tensor]:
    """The CPU generator's state and, where CUDA is initialised, each CUDA device's."""
    out = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{i}"] = state
    return out


def restore_rng(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Set the generators from a checkpoint's ``rng.*`` tensors; returns the states skipped
    because this machine has no such device (a CUDA run resumed on a CPU, say)."""
    skipped = []
    if "rng.torch" in tensors:
        torch.set_rng_state(tensors["rng.torch"].cpu())
    for name, state in tensors.items():
        if name.startswith("rng.cuda."):
            i = int(name.rsplit(".", 1)[1])
            if torch.cuda.is_available() and i < torch.cuda.device_count():
                torch.cuda.set_rng_state(state.cpu(), i)
            else:
                skipped.append(name)
    return skipped


def training_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """A training checkpoint's tensors: ``model.*`` (weights), ``optim.<param index>.<name>``
    (the optimizer's state) and ``rng.*`` (every generator's state)."""
    out = {f"model.{k}": v for k, v in model.state_dict().items()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            out[f"optim.{i}.{k}"] = v if isinstance(v, torch.Tensor) else torch.tensor(v)
    out.update(rng_tensors())
    return out


def restore_training(model: torch.nn.Module, opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                     where: str) -> None:
    """Load ``training_tensors`` back: weights (strictly), the optimizer's state (onto the
    parameters' device) and the generators; ``where`` names the checkpoint in errors. The
    optimizer's hyperparameters (``param_groups``: lr, betas) stay the caller's: a run whose
    scheduler changes them restores them itself (``train.caption.CaptionTask`` does)."""
    sd = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise CheckpointError(f"the weights in {where} do not fit the model its config.json describes: {first}") from None
    state: dict[int, dict] = {}
    for name, t in tensors.items():
        if name.startswith("optim."):
            _, i, k = name.split(".", 2)
            state.setdefault(int(i), {})[k] = t
    opt.load_state_dict({"state": state, "param_groups": opt.state_dict()["param_groups"]})
    restore_rng(tensors)


class Progress:
    """A tqdm bar (steps, rate, ETA, the latest loss) on a terminal; plain lines otherwise.

    ``line(msg)`` prints a message above the bar (or as a line); ``update(step, **shown)``
    advances the bar to ``step``. With ``enabled=False`` nothing is printed at all.
    """

    def __init__(self, total: int, *, initial: int = 0, desc: str = "train", enabled: bool = True, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", file=self.stream,
                            dynamic_ncols=True, leave=True)

    def update(self, step: int, **shown: float) -> None:
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            if shown:
                self.bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)

    def line(self, msg: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def first_step_line(step: int, total: int, loss: float, seconds: float) -> str:
    """The line a run prints after its first step, so that it says it is alive within seconds."""
    return f"step {step}/{total}  loss {loss:.4f}  (first step {seconds:.1f} s)"


class Deadline:
    """A wall-time budget of ``max_seconds`` (None: none) from ``start`` (a ``time.perf_counter()``).

    ``due(step_s)`` after a step of ``step_s`` seconds: True when one more step and the closing
    work (the evaluation and the checkpoint, as long as the latest ones took: ``took``) would end
    past the budget, so that the run stops now and ends within it. Reads the clock only."""

    def __init__(self, max_seconds: float | None, start: float):
        self.max_seconds, self.start = max_seconds, start
        self.tail: dict[str, float] = {}

    def took(self, what: str, seconds: float) -> None:
        """The latest ``what`` ("eval", "save") took ``seconds``."""
        self.tail[what] = seconds

    def due(self, step_s: float, world: World | None = None) -> bool:
        """With ``world`` of several processes, True on all when on any (one collective per step,
        only under a budget), so that they stop at the same step."""
        if self.max_seconds is None:
            return False
        due = time.perf_counter() - self.start + step_s + sum(self.tail.values()) > self.max_seconds
        return world.sum(int(due)) > 0 if world is not None and world.size > 1 else due


def progress_iter(items, *, desc: str, enabled: bool = True, stream=None, total: int | None = None) -> Iterator:
    """``items`` with a tqdm bar when ``stream`` (stderr) is a terminal; the items alone otherwise."""
    stream = stream or sys.stderr
    if not (enabled and getattr(stream, "isatty", lambda: False)()):
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, total=total, file=stream, dynamic_ncols=True, leave=False)


@dataclass
class RunLog:
    """The run's records (``metrics.jsonl``), mirrored to TensorBoard when ``tensorboard`` names a folder."""

    records: list[dict] = field(default_factory=list)
    tensorboard: Path | None = None
    _writer: Any = None

    def add(self, record: dict) -> None:
        self.records.append(record)
        if self.tensorboard is None:
            return
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

            self._writer = SummaryWriter(log_dir=str(self.tensorboard))
        step = int(record["step"])
        for k, v in record.items():
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._writer.add_scalar(k.replace("valid_", "valid/") if k.startswith("valid_") else f"train/{k}", v, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


@dataclass
class Runtime:
    """Device, precision and processes of one training run (the defaults: one CPU process, fp32)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    precision: str = "fp32"
    world: World = field(default_factory=World)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")

    @classmethod
    def create(cls, device: str = "auto", precision: str = "fp32") -> Runtime:
        """Join torchrun's processes if the environment names them; pick the device for this rank."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")
        wanted = resolve_device(device)
        world = World.from_env(wanted)
        dev = resolve_device(device, world.local_rank) if wanted.type == "cuda" else wanted
        return cls(dev, precision, world)

    @classmethod
    def local(cls, device: str = "auto", precision: str = "fp32") -> Runtime:
        """One process on ``device``, never joining a process group: for running a trained model."""
        return cls(resolve_device(device), precision)

    @property
    def is_main(self) -> bool:
        return self.world.is_main

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device (in place) and return what to call in training: DDP with > 1 process."""
        model.to(self.device)
        return self.world.wrap(model)

    def to(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t.to(self.device, non_blocking=True) for t in tensors)

    def step(self, model: torch.nn.Module, opt: torch.optim.Optimizer,
             loss_sum: Callable[[], tuple[torch.Tensor, int]], *, clip: float = 0.0,
             real: bool = True) -> tuple[torch.Tensor, int]:
        """One optimizer step. ``loss_sum()`` returns (the loss summed over this rank's items, their count);
        the gradient is that of the sum over *all* ranks' items divided by their global count.
        ``real=False``: this rank's items are a stand-in for an empty shard (``World.shard_or_stand_in``),
        run for DDP's all-reduce with weight 0 and count 0. Returns the detached local sum and count (for the log)."""
        with self.autocast():
            total, n = loss_sum()
        if not real:
            total, n = total * 0.0, 0
        n_global = self.world.sum(n)
        opt.zero_grad(set_to_none=True)
        if total.dtype in (torch.bfloat16, torch.float16):
            total = total.float()  # the sum in float32, not in 8 bits of mantissa
        (total * self.world.size / max(1.0, n_global)).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return total.detach(), n

    def mean(self, local_sum: float, local_n: int) -> float:
        """Σ over ranks of the sums / Σ over ranks of the counts."""
        if self.world.size == 1:
            return local_sum / max(1, local_n)
        return self.world.sum(local_sum) / max(1.0, self.world.sum(local_n))


__all__ = ["DEVICES", "PRECISIONS", "Runtime", "device_of", "Progress", "Deadline", "first_step_line", "RunLog", "progress_iter", "resolve_device",
           "rng_tensors", "restore_rng", "training_tensors", "restore_training"]
