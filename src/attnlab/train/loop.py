"""The training loop for translation models, with validation, checkpoints and exact resume.

Any model with ``forward(src, src_mask, tgt_in) -> logits (b, t, V)``, a
``config_dict()`` for its checkpoint, and (for validation by decoding) the step
interface of ``attnlab.train.decode`` trains here. The loss is the mean
cross-entropy over target tokens (padding ignored); Adam with gradient-norm
clipping.

Determinism and resume: the batches of step i are a pure function of (seed, i)
(``attnlab.data.batching.batch_order``), and a checkpoint holds the weights,
Adam's moments, the step and the torch RNG state. ``train(..., resume=True)``
loads them and continues, so a run killed after its last checkpoint and
resumed ends with the same weights as an uninterrupted one (tested).

Checkpoint layout (``attnlab.train.checkpoint``): ``model.safetensors`` with
``model.*``, ``optim.<param index>.<name>`` and ``rng.torch`` tensors;
``config.json`` with ``model``, ``train``, ``state`` and any extra entries
(data name, tokenisation); further text files such as the vocabularies.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from .._limits import check_fields, check_step, check_values
from ..data.batching import Example, batch_order, batches_in_order, collate, source_batch
from ..data.vocab import PAD
from . import runlog
from .checkpoint import CheckpointError, load_checkpoint, read_text, save_checkpoint
from .finite import FiniteGuard, check_mode
from .runtime import (
    Deadline,
    Progress,
    RunLog,
    Runtime,
    device_of,
    first_step_line,
    restore_training,
    training_tensors,
)


@dataclass
class TrainConfig:
    steps: int = 3000  # optimizer steps in all
    batch_size: int = 64
    lr: float = 2e-3
    clip: float = 1.0  # max gradient norm
    seed: int = 0
    eval_every: int = 500  # validation loss + greedy exact match every so many steps (0: only at the end)
    save_every: int = 500  # checkpoint every so many steps (0: only at the end)
    log_every: int = 20
    valid_decode: int = 200  # validation sentences decoded greedily for exact match
    max_len: int = 200  # decoding guard
    on_nonfinite: str = "stop"  # a step with non-finite gradients: stop the run, or skip its update (train.finite)
    max_seconds: float | None = None  # wall-time budget, the closing validation and checkpoint included

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges of every field (attnlab._limits)
        for f in ("steps", "batch_size", "log_every"):
            if getattr(self, f) < 1:
                raise ValueError(f"{f} must be >= 1; got {getattr(self, f)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0; got {self.lr}")
        check_mode(self.on_nonfinite)


@dataclass
class TrainResult:
    step: int
    train_loss: float
    valid: dict = field(default_factory=dict)
    tokens_per_s: float = 0.0
    history: list = field(default_factory=list)


def loss_on(model, batch) -> tuple[torch.Tensor, int]:
    """The mean cross-entropy over the batch's target tokens (padding ignored) and their count."""
    total, n = loss_sum_on(model, batch)
    return total / max(1, n), n


def loss_sum_on(model, batch) -> tuple[torch.Tensor, int]:
    """The cross-entropy summed over the batch's target tokens (padding ignored) and their count."""
    logits = model(batch.src, batch.src_mask, batch.tgt_in)  # (b, t, V)
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch.tgt_out.reshape(-1),
                            ignore_index=PAD, reduction="sum")
    return total, batch.n_tokens


@torch.inference_mode()
def validate(model, examples: Sequence[Example], cfg: TrainConfig, decode: Callable | None = None) -> dict:
    """Teacher-forced loss on every example; greedy exact match on the first ``valid_decode``."""
    from .decode import greedy

    was = model.training
    model.eval()
    device = device_of(model)
    total, n = 0.0, 0
    for idx in batches_in_order(examples, cfg.batch_size):
        loss, k = loss_sum_on(model, collate([examples[i] for i in idx]).to(device))
        total, n = total + float(loss), n + k
    out = {"loss": total / max(1, n)}
    sub = list(examples[: cfg.valid_decode])
    if sub and hasattr(model, "step"):
        hits = 0
        for i in range(0, len(sub), cfg.batch_size):
            part = sub[i : i + cfg.batch_size]
            src, mask = (t.to(device) for t in source_batch([s for s, _ in part]))
            guard = min(cfg.max_len, 2 * max(len(t) for _, t in part) + 10)
            hyps = (decode or greedy)(model, src, mask, max_len=guard)
            hits += sum(h.tokens == t for h, (_, t) in zip(hyps, part))
        out["exact"] = 100.0 * hits / len(sub)
    model.train(was)
    return out


def _validation_seconds(model, examples: Sequence[Example], cfg: TrainConfig, rt: Runtime) -> float:
    """About how long ``validate`` takes: the time of its first batch, times its batches (until a
    whole one is timed). Draws no random number."""
    t = time.perf_counter()
    with rt.autocast():
        validate(model, examples[: cfg.batch_size], cfg)
    return (time.perf_counter() - t) * -(-len(examples) // cfg.batch_size)


def valid_words(valid: dict) -> str:
    """A validation in words: ``valid loss 6.604, exact match 0.0%``."""
    words = [f"valid loss {valid['loss']:.3f}" if "loss" in valid else "not validated"]
    if "exact" in valid:
        words.append(f"exact match {valid['exact']:.1f}%")
    return ", ".join(words)


def save(out: Path, model, opt, cfg: TrainConfig, step: int, extra: dict, files: dict, valid: dict,
         log: list[dict] | None = None) -> None:
    tensors = training_tensors(model, opt)
    config = {"model": model.config_dict(), "train": asdict(cfg), "state": {"step": step, "valid": valid}, **extra}
    save_checkpoint(out, tensors, config, {**files, runlog.NAME: runlog.jsonl(log or [])})


def train(
    model,
    train_examples: Sequence[Example],
    valid_examples: Sequence[Example],
    cfg: TrainConfig,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    extra_config: dict | None = None,
    files: dict[str, str] | None = None,
    progress: bool = True,
    stream=None,
    stop_after: int | None = None,
    runtime: Runtime | None = None,
    tensorboard: bool = False,
    desc: str = "train",
) -> TrainResult:
    """Train ``model`` for ``cfg.steps`` steps; checkpoints go to ``out`` (a folder).

    ``resume=True`` continues from the checkpoint in ``out``. ``stop_after``
    stops after that many steps *without* saving (as if the run were killed).
    ``runtime`` (``train.runtime.Runtime``): device, precision and torchrun's processes
    (default: one CPU process in float32). Under torchrun, rank r trains on its shard of
    each global batch; rank 0 validates, logs and writes the checkpoint. ``desc`` names the
    run in the progress bar and lines (an experiment's model, say).
    """
    if not train_examples:
        raise ValueError("no training examples")
    rt = runtime or Runtime()
    stream = stream or sys.stderr
    extra, files = dict(extra_config or {}), dict(files or {})
    torch.manual_seed(cfg.seed)
    net = rt.prepare(model)  # on the device; DDP when there are several processes
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    step, valid = 0, {}
    out = Path(out) if out is not None else None
    log = RunLog(tensorboard=out / "tensorboard" if tensorboard and out is not None and rt.is_main else None)
    wall0 = time.perf_counter()
    if resume:
        if out is None or not (out / "config.json").exists():
            raise CheckpointError(f"--resume: no checkpoint to resume at {out}")
        tensors, config, _ = load_checkpoint(out)
        if config.get("model") != model.config_dict():
            raise CheckpointError(f"--resume: the checkpoint at {out} is of another model ({config.get('model')})")
        restore_training(model, opt, tensors, str(out))
        state = config.get("state")
        step = check_step(state.get("step") if isinstance(state, dict) else None, f"{out}/config.json: state.step")
        log.records = [r for r in runlog.read(out) if r["step"] <= step]
        wall0 -= max((r.get("wall_s", 0.0) for r in log.records), default=0.0)  # wall time continues
        for name in files:
            read_text(out, name)  # the vocabularies must be there too
    guard = FiniteGuard(opt, cfg.on_nonfinite, first_step=step)  # the optimizer, with each step's gradients checked
    model.train()
    history, tok, t0 = [], 0, time.perf_counter()
    loss_sum, loss_n = torch.zeros((), device=rt.device), 0
    n_batches = len(batch_order(train_examples, cfg.batch_size, seed=cfg.seed, epoch=0))
    order, order_epoch = None, -1
    bar = Progress(cfg.steps, initial=step, desc=desc, enabled=progress and rt.is_main, stream=stream)
    train_loss = float("nan")
    deadline, first = Deadline(cfg.max_seconds, wall0), step
    while step < cfg.steps:
        if stop_after is not None and step >= stop_after:
            break
        epoch, pos = divmod(step, n_batches)
        if epoch != order_epoch:
            order, order_epoch = batch_order(train_examples, cfg.batch_size, seed=cfg.seed, epoch=epoch), epoch
        # every rank draws the same global batch, then trains on its shard
        mine, real = rt.world.shard_or_stand_in(order[pos])
        t_step = time.perf_counter()
        batch = collate([train_examples[i] for i in mine]).to(rt.device)
        total, n = rt.step(net, guard, lambda b=batch: loss_sum_on(net, b), clip=cfg.clip, real=real)
        step, step_s = step + 1, time.perf_counter() - t_step
        if step == first + 1 and cfg.max_seconds is not None and rt.is_main and valid_examples:
            deadline.took("eval", _validation_seconds(model, valid_examples, cfg, rt))
        last = step == cfg.steps or deadline.due(step_s, rt.world)  # --max-seconds: stop while the end fits
        if step == first + 1 and step % cfg.log_every and not last and bar.enabled:  # a line within seconds (one read)
            bar.line(f"{desc}: " + first_step_line(step, cfg.steps, float(total) / max(1, n), time.perf_counter() - t_step))
        loss_sum, loss_n, tok = loss_sum + guard.keep(total, 0.0), loss_n + n * guard.ok, tok + n
        if step % cfg.log_every == 0 or last:
            skipped = guard.read()  # stops a non-finite run (--on-nonfinite stop) before anything is saved
            train_loss = rt.mean(float(loss_sum), int(loss_n))  # the one host read of the interval
            rate = rt.world.sum(tok) / max(1e-9, time.perf_counter() - t0)
            history.append({"step": step, "loss": train_loss, "tokens_per_s": rate, **({"skipped": skipped} if skipped else {})})
            log.add({**history[-1], "wall_s": round(time.perf_counter() - wall0, 3)})
            bar.update(step, loss=train_loss)
            if not bar.tty:
                bar.line(f"{desc}: step {step}/{cfg.steps}  loss {train_loss:.4f}  {rate:,.0f} tok/s")
            loss_sum, loss_n = torch.zeros((), device=rt.device), 0
        if rt.is_main and valid_examples and ((cfg.eval_every and step % cfg.eval_every == 0) or last):
            guard.read()
            t_eval = time.perf_counter()
            with rt.autocast():
                valid = validate(model, valid_examples, cfg)
            guard.check_loss(valid["loss"])
            deadline.took("eval", time.perf_counter() - t_eval)
            t0 += time.perf_counter() - t_eval  # the rate counts training time only
            log.add({"step": step, **{f"valid_{k}": v for k, v in valid.items()},
                     "wall_s": round(time.perf_counter() - wall0, 3)})
            bar.line(f"{desc}: step {step}: {valid_words(valid)}")
        if rt.is_main and out is not None and ((cfg.save_every and step % cfg.save_every == 0) or last):
            t_save = time.perf_counter()
            guard.check_weights(model)  # a non-finite model never overwrites the last good checkpoint
            save(out, model, opt, cfg, step, extra, files, valid, log.records)
            deadline.took("save", time.perf_counter() - t_save)
            t0 += time.perf_counter() - t_save
        if last:
            break
    bar.close()
    log.close()
    rt.world.barrier()  # the checkpoint is complete before any rank returns
    elapsed = time.perf_counter() - t0
    return TrainResult(step, train_loss, valid, tok / max(1e-9, elapsed), history)


def train_config_from(d: dict, where: str = "config.json") -> TrainConfig:
    """The ``TrainConfig`` a checkpoint's ``"train"`` entry holds, each field checked (``attnlab._limits``)."""
    if not isinstance(d, dict):
        raise CheckpointError(f"{where}: 'train' must be an object of settings; got {type(d).__name__}")
    names = {f.name for f in fields(TrainConfig)}
    kept = {k: v for k, v in d.items() if k in names}
    try:
        check_values(TrainConfig, kept, "train.")
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}") from None
    return TrainConfig(**kept)





__all__ = ["TrainConfig", "TrainResult", "train", "validate", "valid_words", "loss_on", "loss_sum_on", "train_config_from"]
