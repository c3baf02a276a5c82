"""The one training loop of attnlab: ``fit(task, config, runtime, out)``.

A *task* (``Task``) says what is trained: its model and optimizer, the batch of step i, the
loss of a batch as (sum, count), its evaluation, its log records and what its checkpoint holds.
The translation models (``train.loop.Seq2SeqTask``), the character GPT (``train.lm.LMTask``),
the captioner (``train.caption.CaptionTask``) and the experiments' classifiers
(``train.classify.ClassifierTask``) are tasks; the loop is the same for all:

* ``Runtime.step``: one optimizer step on this rank's part of the global batch, the gradient
  that of the global mean (``train.runtime``); ``FiniteGuard`` checks every step's gradients
  (``--on-nonfinite stop|skip``, ``train.finite``);
* the loss is summed on the device, with its count, and read once per ``log_every`` steps,
  where the loop logs (no host read per step);
* ``eval_every`` / ``save_every`` steps and at the end: the task's evaluation (its loss checked
  finite) and a checkpoint (``train.checkpoint``: atomic, locked) with the weights, the
  optimizer, every generator, the step, the running loss, the run log and the task's entries;
* ``Deadline``: with ``max_seconds``, the run stops while one more step and the closing
  evaluation and checkpoint still fit in the budget;
* ``resume=True`` continues the checkpoint in ``out`` exactly: a run stopped after a checkpoint
  and resumed ends with the weights (and the logged losses) of an uninterrupted one;
  ``stop_after`` stops after that many steps without saving, as if the run were killed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from .._limits import check_step
from . import runlog
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .finite import FiniteGuard, check_mode
from .runtime import (
    Deadline,
    Progress,
    RunLog,
    Runtime,
    first_step_line,
    restore_training,
    training_tensors,
)


@dataclass
class FitConfig:
    """What the loop itself does: the steps, how often it logs, evaluates and saves (0: only at the
    end), the gradient clipping, the wall-time budget and what a non-finite step does."""

    steps: int
    log_every: int = 0
    eval_every: int = 0
    save_every: int = 0
    clip: float = 1.0
    max_seconds: float | None = None
    on_nonfinite: str = "stop"
    desc: str = "train"  # names the run in the progress bar and lines

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        for name in ("log_every", "eval_every", "save_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0; got {self.max_seconds}")
        check_mode(self.on_nonfinite)

    def due(self, every: int, step: int, last: bool) -> bool:
        return last or bool(every and step % every == 0)


@dataclass
class TrainResult:
    """What a run did: its last step, the train loss of its last logged interval, its last
    evaluation (``valid``, e.g. ``{"loss": ...}``), tokens per second, seconds and its log."""

    step: int
    train_loss: float
    valid: dict = field(default_factory=dict)
    tokens_per_s: float = 0.0
    seconds: float = 0.0
    history: list = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.step

    @property
    def val_loss(self) -> float:
        return float(self.valid.get("loss", math.nan))

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_s


class Task(Protocol):
    """What ``fit`` trains. ``Step`` (below) gives the defaults of the optional parts."""

    model: torch.nn.Module

    def optimizer(self) -> torch.optim.Optimizer: ...  # called once the model is on its device
    def batch(self, step: int, rt: Runtime) -> tuple[Any, bool]: ...  # this rank's part of batch `step`, real?
    def loss_sum(self, net: torch.nn.Module, batch: Any) -> tuple[torch.Tensor, int]: ...
    def after_step(self, step: int) -> None: ...
    def evaluate(self, rt: Runtime) -> dict: ...
    def eval_seconds(self, rt: Runtime) -> float: ...
    def records(self, step: int, train: dict | None, valid: dict) -> list[dict]: ...
    def lines(self, step: int, train: dict | None, valid: dict) -> list[str]: ...
    def checkpoint(self, step: int, records: list[dict]) -> tuple[dict, dict, dict]: ...
    def restore(self, out: Path, tensors: dict, config: dict) -> int: ...
    def model_config(self) -> dict: ...


class Step:
    """Defaults for a task: no schedule, no evaluation, records of the train loss and its rate."""

    model: torch.nn.Module

    def after_step(self, step: int) -> None:
        pass

    def evaluate(self, rt: Runtime) -> dict:
        return {}

    def eval_seconds(self, rt: Runtime) -> float:
        return 0.0

    def records(self, step: int, train: dict | None, valid: dict) -> list[dict]:
        return [{"step": step, **train}] if train else []

    def lines(self, step: int, train: dict | None, valid: dict) -> list[str]:
        return [f"step {step}  loss {train['loss']:.4f}"] if train else []

    def checkpoint(self, step: int, records: list[dict]) -> tuple[dict, dict, dict]:
        return {}, {}, {}

    def model_config(self) -> dict:
        """The model's entry in config.json (a resume checks it): ``models.model_config``."""
        return model_entry(self.model)

    def restore(self, out: Path, tensors: dict, config: dict) -> int:
        state = config.get("state")
        return check_step(state.get("step") if isinstance(state, dict) else None, f"{out}/config.json: state.step")


def model_entry(model: torch.nn.Module) -> dict:
    """The one way a model's configuration is saved: ``models.model_config``."""
    from ..models import model_config

    return model_config(model)


def _differences(recorded: Any, given: dict) -> str:
    """``dim 16 recorded, 32 given; ...``: the model settings in which a resume differs from its checkpoint."""
    if not isinstance(recorded, dict):
        return f"its config.json records {str(recorded)[:80]}"
    def show(d: dict, k: str) -> str:
        return repr(d[k]) if k in d else "(none)"

    names = [k for k in {**recorded, **given} if k not in recorded or k not in given or recorded[k] != given[k]]
    return "; ".join(f"{k} {show(recorded, k)} recorded, {show(given, k)} given" for k in names[:4])


class _Run:
    """One run of ``fit``: its state between the steps (the loop's body is split in its methods)."""

    def __init__(self, task: Task, cfg: FitConfig, rt: Runtime, out: Path | None, log, tensorboard: bool):
        self.task, self.cfg, self.rt, self.out = task, cfg, rt, out
        self.net = rt.prepare(task.model)  # on the device first: a resumed optimizer state lands beside it
        self.opt = task.optimizer()
        self.step, self.valid, self.train_loss = 0, {}, math.nan
        self.log = RunLog(tensorboard=out / "tensorboard" if tensorboard and out is not None and rt.is_main else None)
        self.say = log if rt.is_main else None
        self.loss_sum, self.loss_n, self.tok = torch.zeros((), device=rt.device), 0, 0
        self.tok_all, self.train_s, self.t_interval, self.train_s0 = 0, 0.0, 0.0, 0.0

    def resume(self) -> None:
        out = self.out
        if out is None or not (out / "config.json").exists():
            raise CheckpointError(f"--resume: no checkpoint to resume at {out}")
        tensors, config, _ = load_checkpoint(out)
        self.step = self.task.restore(out, tensors, config)
        recorded, given = config.get("model"), self.task.model_config()
        if recorded != given:
            raise CheckpointError(f"--resume: the checkpoint at {out} is of another model: {_differences(recorded, given)}; "
                                  "resume with the flags of the run it continues (or leave them out)")
        if self.step > self.cfg.steps:
            raise CheckpointError(f"--resume: the run at {out} is at step {self.step}, past the {self.cfg.steps} steps "
                                  "of the run: pass a larger --steps to continue it")
        restore_training(self.task.model, self.opt, tensors, str(out))
        state = config.get("state") or {}  # its counters checked as it was read (checkpoint.check_state)
        s, n = state.get("loss_sum", 0.0), state.get("loss_n", 0)
        if self.rt.is_main:  # the running sum of the interval, once over the ranks
            self.loss_sum, self.loss_n = torch.full((), float(s), device=self.rt.device), int(n)
        self.train_s = self.train_s0 = float(state.get("train_time", 0.0))
        self.log.records = [r for r in runlog.read(out) if r["step"] <= self.step]

    def one_step(self, guard: FiniteGuard) -> tuple[torch.Tensor, int, float]:
        t = time.perf_counter()
        batch, real = self.task.batch(self.step, self.rt)
        total, n = self.rt.step(self.net, guard, lambda: self.task.loss_sum(self.net, batch), clip=self.cfg.clip, real=real)
        self.task.after_step(self.step)
        self.step += 1
        self.loss_sum, self.loss_n = self.loss_sum + guard.keep(total, 0.0), self.loss_n + n * guard.ok
        self.tok += n
        step_s = time.perf_counter() - t
        self.train_s += step_s
        self.t_interval += step_s
        return total, n, step_s

    def log_train(self, guard: FiniteGuard) -> dict:
        skipped = guard.read()  # stops a non-finite run (--on-nonfinite stop) before anything is saved
        self.train_loss = self.rt.mean(float(self.loss_sum), int(self.loss_n))  # the one host read of the interval
        tok = self.rt.world.sum(self.tok)
        self.tok_all += tok
        rate = tok / max(1e-9, self.t_interval)
        self.loss_sum, self.loss_n, self.tok, self.t_interval = torch.zeros((), device=self.rt.device), 0, 0, 0.0
        return {"loss": self.train_loss, "tokens_per_s": rate, **({"skipped": skipped} if skipped else {})}

    def evaluate(self, guard: FiniteGuard, deadline: Deadline) -> dict:
        guard.read()
        t = time.perf_counter()
        with self.rt.autocast():
            valid = self.task.evaluate(self.rt)
        if "loss" in valid:
            guard.check_loss(valid["loss"])
        deadline.took("eval", time.perf_counter() - t)
        return valid

    def write_checkpoint(self, guard: FiniteGuard, deadline: Deadline) -> None:
        t = time.perf_counter()
        guard.check_weights(self.task.model)  # a non-finite model never overwrites the last good checkpoint
        s, n = self.rt.world.sum(float(self.loss_sum)), self.rt.world.sum(int(self.loss_n))  # every rank: collectives
        if self.rt.is_main and self.out is not None:
            tensors, config, files = self.task.checkpoint(self.step, self.log.records)
            state = {"step": self.step, "valid": self.valid, "loss_sum": s, "loss_n": int(n), "train_time": self.train_s,
                     **config.pop("state", {})}
            config = {"model": self.task.model_config(), **config, "state": state}
            tensors = {**training_tensors(self.task.model, self.opt), **tensors}
            save_checkpoint(self.out, tensors, config, {**files, runlog.NAME: runlog.jsonl(self.log.records)})
        deadline.took("save", time.perf_counter() - t)

    def report(self, step: int, train: dict | None, valid: dict, wall0: float, bar: Progress) -> None:
        wall = round(time.perf_counter() - wall0, 3)
        for record in self.task.records(step, train, valid):
            self.log.add({**record, "wall_s": wall})
        if train:
            bar.update(step, loss=train["loss"])

    def tell(self, step: int, train: dict | None, valid: dict, bar: Progress) -> None:
        """The step's lines, printed once its checkpoint (if it saves one) is on disk."""
        if self.say is not None and (valid or not bar.tty):  # on a terminal the bar shows the train loss
            for msg in self.task.lines(step, train, valid):
                self.say(f"{self.cfg.desc}: {msg}", bar)


def _emit(log: Callable[[str], None] | None):
    """Lines above the bar on a terminal, else through ``log``."""
    if log is None:
        return None
    return lambda msg, bar: bar.line(msg) if bar.tty else log(msg)


def fit(task: Task, config: FitConfig, runtime: Runtime | None = None, out: str | Path | None = None, *,
        resume: bool = False, stop_after: int | None = None, progress: bool = False,
        log: Callable[[str], None] | None = None, tensorboard: bool = False) -> TrainResult:
    """Train ``task`` for ``config.steps`` steps (see the module docstring); checkpoints go to ``out``.
    ``progress``: a tqdm bar when stderr is a terminal; ``log``: called with each line (on rank 0)."""
    rt = runtime or Runtime()
    out = Path(out) if out is not None else None
    run = _Run(task, config, rt, out, _emit(log), tensorboard)
    wall0 = time.perf_counter()
    if resume:
        run.resume()
        wall0 -= max((r.get("wall_s", 0.0) for r in run.log.records), default=0.0)  # wall time continues
    guard = FiniteGuard(run.opt, config.on_nonfinite, first_step=run.step)  # each step's gradients checked
    bar = Progress(config.steps, initial=run.step, desc=config.desc, enabled=progress and rt.is_main)
    deadline, first = Deadline(config.max_seconds, wall0), run.step
    task.model.train()
    while run.step < config.steps and (stop_after is None or run.step < stop_after):
        total, n, step_s = run.one_step(guard)
        step = run.step
        if step == first + 1 and config.max_seconds is not None:  # until an evaluation is timed: an estimate
            deadline.took("eval", task.eval_seconds(rt))
        last = step == config.steps or deadline.due(step_s, rt.world)  # --max-seconds: stop while the end fits
        if step == first + 1 and not config.due(config.log_every, step, last):
            loss = rt.mean(float(total), int(n))  # every rank: the mean over the processes (one sequence's shards)
            if run.say is not None:
                run.say(f"{config.desc}: " + first_step_line(step, config.steps, loss, step_s), bar)
        train = run.log_train(guard) if config.due(config.log_every, step, last) else None
        valid = run.evaluate(guard, deadline) if config.due(config.eval_every, step, last) else {}
        run.valid = valid or run.valid
        if train or valid:
            run.report(step, train, valid, wall0, bar)
        bar.update(step)
        if config.due(config.save_every, step, last) and out is not None:
            run.write_checkpoint(guard, deadline)
        if train or valid:  # after the checkpoint: no line announces a step that a kill could still lose
            run.tell(step, train, valid, bar)
        if last:
            break
    bar.close()
    run.log.close()
    rt.world.barrier()  # the checkpoint is complete before any rank returns
    return TrainResult(run.step, run.train_loss, run.valid, (run.tok_all + rt.world.sum(run.tok)) / max(1e-9, run.train_s - run.train_s0),
                       time.perf_counter() - wall0, run.log.records)


__all__ = ["FitConfig", "TrainResult", "Task", "Step", "fit", "model_entry"]
