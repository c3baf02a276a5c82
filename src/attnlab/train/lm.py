"""Training loop of the character-level language model (``attnlab train lm``).

    loss = −(1/bn) Σ log p(t_{i+1} | t_{≤i})        next-character cross-entropy
    random windows of block_size + 1 characters from the first 90 % of the text;
    validation loss on the last 10 %; AdamW with linear warm-up and cosine decay.

``train_lm`` returns a ``TrainResult`` (losses, tokens per second) and writes a
checkpoint folder (``model.safetensors``, ``config.json``, ``vocab.json``) with
``attnlab.train.checkpoint``; ``attnlab.train.load.load_model`` reads it back.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from .._limits import check_fields, check_step
from ..data.vocab import Vocab, read_vocab
from ..models import create_model, model_config
from ..models.gpt import GPT, GPTConfig
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
class LMTrainConfig:
    steps: int = 300  # optimizer steps
    batch_size: int = 32
    block_size: int = 128
    dim: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int | None = None
    positional: str = "learned"
    dropout: float = 0.0
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup: int = 20
    eval_every: int = 100  # steps between validation losses (0: only at the end)
    eval_batches: int = 10
    val_fraction: float = 0.1
    seed: int = 0
    max_seconds: float | None = None  # stop early after this much wall time
    save_every: int = 0  # steps between checkpoints (0: only at the end)
    on_nonfinite: str = "stop"  # a step with non-finite gradients: stop the run, or skip its update (train.finite)

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges of every field (attnlab._limits)
        if self.steps < 1 or self.batch_size < 1 or self.block_size < 2:
            raise ValueError(f"steps, batch_size must be >= 1 and block_size >= 2; got {self.steps}, {self.batch_size}, {self.block_size}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1); got {self.val_fraction}")
        for name in ("dim", "num_layers", "num_heads", "eval_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        for name in ("warmup", "eval_every", "save_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.num_kv_heads is not None and self.num_kv_heads < 1:
            raise ValueError(f"num_kv_heads must be >= 1; got {self.num_kv_heads}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")
        if not self.lr > 0 or self.weight_decay < 0:
            raise ValueError(f"lr must be > 0 and weight_decay >= 0; got {self.lr}, {self.weight_decay}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0; got {self.max_seconds}")
        check_mode(self.on_nonfinite)


@dataclass
class TrainResult:
    steps: int
    train_loss: float
    val_loss: float
    tokens_per_second: float
    seconds: float
    history: list[dict] = field(default_factory=list)


def split(ids: torch.Tensor, val_fraction: float, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    n_val = max(int(len(ids) * val_fraction), block_size + 1)
    if len(ids) - n_val < block_size + 1:
        raise ValueError(
            f"the text ({len(ids)} characters) is too short for block_size={block_size}: "
            f"need at least {2 * (block_size + 1)} characters"
        )
    return ids[:-n_val], ids[-n_val:]


def batch(ids: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs (b, block), targets (b, block) shifted by one."""
    starts = torch.randint(0, len(ids) - block_size, (batch_size,), generator=generator)
    idx = starts.unsqueeze(1) + torch.arange(block_size + 1)  # (b, block + 1)
    w = ids[idx]
    return w[:, :-1], w[:, 1:]


def _loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-character cross-entropy summed over the tokens: logits (b, n, V), targets (b, n)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")


@torch.no_grad()
def evaluate(model: GPT, ids: torch.Tensor, cfg: LMTrainConfig, generator: torch.Generator) -> float:
    model.eval()
    dev = device_of(model)
    losses = [model.loss(*(t.to(dev) for t in batch(ids, cfg.batch_size, cfg.block_size, generator))).item()
              for _ in range(cfg.eval_batches)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
@torch.no_grad()
def _forward_seconds(model: GPT, x: torch.Tensor, y: torch.Tensor, rt: Runtime) -> float:
    """How long the loss of one batch takes in evaluation mode, as ``evaluate`` runs it (no gradients,
    no random number drawn): the faster of two timings, since the first call also pays its warm-up."""
    model.eval()
    times = []
    for _ in range(2):
        t = time.perf_counter()
        with rt.autocast():
            model.loss(x, y).item()
        times.append(time.perf_counter() - t)
    model.train()
    return min(times)


def _lr(step: int, cfg: LMTrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def build_model(cfg: LMTrainConfig, vocab_size: int) -> GPT:
    return create_model(GPTConfig(
        vocab_size=vocab_size, block_size=cfg.block_size, dim=cfg.dim, num_layers=cfg.num_layers,
        num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads, dropout=cfg.dropout, positional=cfg.positional,
    ))


def train_lm(text: str, cfg: LMTrainConfig, out_dir: str | Path | None = None, *, log=None,
             runtime: Runtime | None = None, progress: bool = False, tensorboard: bool = False,
             resume: bool = False, stop_after: int | None = None, data: dict | None = None
             ) -> tuple[GPT, Vocab, TrainResult]:
    """Train a character GPT on ``text``; write a checkpoint to ``out_dir`` if given (``data``: where
    the text came from, kept in its config so that later commands find the held-out part again).

    ``runtime``: device, precision and torchrun's processes (``train.runtime``; default one CPU
    process in float32): every rank draws the same global batch and trains on its rows; rank 0
    writes the checkpoint. ``progress``: a tqdm bar on a terminal. ``log``: called with a line
    at each validation. Checkpoints every ``cfg.save_every`` steps and at the end hold the
    optimizer and every generator too, so ``resume=True`` continues the run in ``out_dir``
    exactly (with any number of processes); ``stop_after`` stops after that many steps
    without saving, as if the run were killed."""
    rt = runtime or Runtime()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    vocab = Vocab.chars(text)
    ids = vocab.encode_tensor(text)
    train_ids, val_ids = split(ids, cfg.val_fraction, cfg.block_size)
    model = build_model(cfg, len(vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95)
    )
    out = Path(out_dir) if out_dir is not None else None
    runlog_ = RunLog(tensorboard=out / "tensorboard" if tensorboard and out is not None and rt.is_main else None)
    net = rt.prepare(model)  # on the device first: a resumed optimizer state then lands beside its parameters
    first, train_time, loss_ema = 0, 0.0, None
    if resume:
        first, train_time, loss_ema = _resume(out, model, opt, gen, vocab, runlog_)
    guard = FiniteGuard(opt, cfg.on_nonfinite, first_step=first)  # the optimizer, with each step's gradients checked
    bar = Progress(cfg.steps, initial=first, desc="train lm", enabled=progress and rt.is_main)
    rows, real = rt.world.shard_or_stand_in(list(range(cfg.batch_size)))  # this rank's rows of each global batch
    start = time.perf_counter() - (runlog_.records[-1]["wall_s"] if runlog_.records else 0.0)
    deadline = Deadline(cfg.max_seconds, start)
    say = (lambda msg: bar.line(msg) if bar.tty else log(msg)) if log is not None and rt.is_main else None
    model.train()
    step, killed = first - 1, False
    for step in range(first, cfg.steps):
        if stop_after is not None and step >= stop_after:
            step, killed = step - 1, True
            break
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = _lr(step, cfg)
        x, y = batch(train_ids, cfg.batch_size, cfg.block_size, gen)
        x, y = rt.to(x[rows], y[rows])
        total, _ = rt.step(net, guard, lambda x=x, y=y: (_loss_sum(net(x), y), y.numel()), clip=1.0, real=real)
        step_s = time.perf_counter() - t0
        train_time += step_s
        if step == first and say is not None:  # a line within seconds, not at the first evaluation (one read)
            say(first_step_line(step + 1, cfg.steps, float(total) / y.numel(), time.perf_counter() - t0))
        # the running loss stays a tensor on the device (no read, no collective per step); each rank's
        # is its sum over the global token count times the world size, so that the mean of the ranks'
        # running losses is the running global loss even when their shares differ (a batch of 5 on 2)
        loss = total.detach() * rt.world.size / (cfg.batch_size * cfg.block_size)
        ema = loss if loss_ema is None else 0.9 * loss_ema + 0.1 * loss
        loss_ema = guard.keep(ema, torch.zeros_like(loss) if loss_ema is None else loss_ema)  # a skipped step: unchanged
        bar.update(step + 1)
        if step == first and cfg.max_seconds is not None:  # until an evaluation is timed: one batch's, times its batches
            deadline.took("eval", cfg.eval_batches * _forward_seconds(model, x, y, rt))
        last = step == cfg.steps - 1 or deadline.due(step_s, rt.world)  # --max-seconds: stop while the end fits
        if last or (cfg.eval_every and (step + 1) % cfg.eval_every == 0):
            skipped = guard.read()  # stops a non-finite run (--on-nonfinite stop) before anything is saved
            t_eval = time.perf_counter()
            with rt.autocast():
                val = evaluate(model, val_ids, cfg, gen)  # every rank, so that the generators stay equal
            deadline.took("eval", time.perf_counter() - t_eval)
            guard.check_loss(val)
            train_loss = rt.world.mean(float(loss_ema))
            tps = (step + 1) * cfg.batch_size * cfg.block_size / train_time
            runlog_.add({"step": step + 1, "train_loss": round(train_loss, 4), "val_loss": round(val, 4),
                         "tokens_per_second": round(tps, 1), "wall_s": round(time.perf_counter() - start, 3),
                         **({"skipped": skipped} if skipped else {})})
            bar.update(step + 1, loss=train_loss)
            if say is not None:
                say(f"step {step + 1:>5}  train {train_loss:.4f}  val {val:.4f}  {tps:,.0f} tokens/s")
        if out is not None and not last and cfg.save_every and (step + 1) % cfg.save_every == 0:
            state = {"step": step + 1, "loss_ema": rt.world.mean(float(loss_ema)), "train_time": train_time}
            guard.check_weights(model)  # a non-finite model never overwrites the last good checkpoint
            if rt.is_main:
                t_save = time.perf_counter()
                save_lm(out, model, vocab, cfg, history=runlog_.records, training=(opt, gen, state), data=data)
                deadline.took("save", time.perf_counter() - t_save)
        if last:
            break
    bar.close()
    runlog_.close()
    history = runlog_.records
    steps_done = step + 1
    result = TrainResult(
        steps=steps_done,
        train_loss=history[-1]["train_loss"] if history else float("nan"),
        val_loss=history[-1]["val_loss"] if history else float("nan"),
        tokens_per_second=steps_done * cfg.batch_size * cfg.block_size / max(train_time, 1e-9),
        seconds=time.perf_counter() - start,
        history=history,
    )
    if out is not None and not killed:
        guard.check_weights(model)
        ema = None if loss_ema is None else rt.world.mean(float(loss_ema))  # every rank: a collective
        if rt.is_main:
            save_lm(out, model, vocab, cfg, result, data=data, training=(opt, gen, {"step": steps_done, "loss_ema": ema,
                                                                          "train_time": train_time}))
    rt.world.barrier()
    return model, vocab, result


def _resume(out: Path | None, model: GPT, opt, gen: torch.Generator, vocab: Vocab, log: RunLog) -> tuple[int, float, float]:
    """Load the run in ``out`` into ``model``, ``opt``, ``gen`` and ``log``; returns (step, train time, loss EMA)."""
    if out is None or not (out / "config.json").exists():
        raise CheckpointError(f"--resume: no checkpoint to resume at {out}")
    tensors, config, _ = load_checkpoint(out)
    if read_vocab(read_text(out, "vocab.json")).itos != vocab.itos:
        raise CheckpointError(f"--resume: the text has other characters than the run at {out} was trained on")
    if config.get("model") != model_config(model):
        raise CheckpointError(f"--resume: the checkpoint at {out} is of another model ({config.get('model')}); "
                              "resume with the flags of the run it continues")
    if "state" not in config or "rng.batches" not in tensors:
        raise CheckpointError(f"--resume: {out} holds weights only (written before checkpoints kept the optimizer)")
    restore_training(model, opt, tensors, str(out))
    gen.set_state(tensors["rng.batches"])
    st = config["state"]
    if not isinstance(st, dict):
        raise CheckpointError(f"--resume: {out}/config.json: 'state' must be an object; got {type(st).__name__}")
    step = check_step(st.get("step"), f"--resume: {out}/config.json: state.step")
    train_time, ema = st.get("train_time"), st.get("loss_ema")
    for name, v in (("train_time", train_time), ("loss_ema", ema)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise CheckpointError(f"--resume: {out}/config.json: state.{name} must be a finite number; got {v!r}")
    log.records = [r for r in runlog.read(out) if r["step"] <= step]
    return step, float(train_time or 0.0), ema


def save_lm(out_dir: str | Path, model: GPT, vocab: Vocab, cfg: LMTrainConfig, result: TrainResult | None = None,
            *, history: list[dict] | None = None, training: tuple | None = None, data: dict | None = None) -> Path:
    """The checkpoint folder: the weights, ``config.json``, ``vocab.json`` and ``metrics.jsonl``;
    with ``training=(optimizer, batch generator, state)`` also what ``resume`` needs; ``data``: the
    text's source (``{"name": "shakespeare", "plays": N}`` or ``{"name": "text", "path": ...}``)."""
    config = {"kind": "char-lm", "model": model_config(model), "train": asdict(cfg)}
    if data is not None:
        config["data"] = data
    if result is not None:
        config["result"] = asdict(result)
    files = {"vocab.json": vocab.to_json()}
    records = history if history is not None else (result.history if result is not None else None)
    if records is not None:
        files[runlog.NAME] = runlog.jsonl(records)
    tensors = dict(model.state_dict())
    if training is not None:
        opt, gen, state = training
        tensors = {**training_tensors(model, opt), "rng.batches": gen.get_state()}
        config["state"] = state
    return save_checkpoint(out_dir, tensors, config, files=files)


__all__ = ["LMTrainConfig", "TrainResult", "train_lm", "save_lm", "batch", "split", "evaluate"]
