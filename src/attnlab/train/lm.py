"""Training loop of the character-level language model (``attnlab train lm``).

    loss = −(1/bn) Σ log p(t_{i+1} | t_{≤i})        next-character cross-entropy
    random windows of block_size + 1 characters from the first 90 % of the text;
    validation loss on the last 10 %; AdamW with linear warm-up and cosine decay.

``LMTask`` is this model's task of the one loop ``train.fit.fit``; ``train_lm`` runs it and
returns a ``TrainResult`` (losses, tokens per second), writing a checkpoint folder
(``model.safetensors``, ``config.json``, ``vocab.json``, ``metrics.jsonl``) with
``attnlab.train.checkpoint``; ``attnlab.train.load.load_model`` reads it back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .._limits import check_fields, check_step
from ..data.vocab import Vocab, read_vocab
from ..models import create_model
from ..models.gpt import GPT, GPTConfig
from .checkpoint import CheckpointError, read_text
from .finite import check_mode
from .fit import FitConfig, Step, TrainResult, fit
from .runtime import Runtime, device_of


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
    context_parallel: int = 1  # > 1: each window split across this many processes (all of torchrun's)
    cp_mode: str = "ring"  # how they attend over the whole window: "ring" or "ulysses"

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
        if self.cp_mode not in ("ring", "ulysses"):
            raise ValueError(f"cp_mode must be 'ring' or 'ulysses'; got {self.cp_mode!r}")
        parts = self.context_parallel * (1 if self.positional == "rope" else 2)
        if self.context_parallel > 1 and self.block_size % parts:
            raise ValueError(f"block_size={self.block_size} does not split across context_parallel="
                             f"{self.context_parallel} processes: it must be divisible by {parts}")

    @property
    def cp_layout(self) -> str:
        """How a window is split: zigzag (equal causal work on every rank), contiguous under rotary positions."""
        return "contiguous" if self.positional == "rope" else "zigzag"


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
def evaluate(model: GPT, ids: torch.Tensor, cfg: LMTrainConfig, generator: torch.Generator,
             part: Callable[[torch.Tensor, torch.Tensor], Window] | None = None) -> float:
    """The mean validation loss over ``cfg.eval_batches`` random batches; ``part``: this rank's part of
    each batch when one window is split across processes (the mean is then this rank's share)."""
    model.eval()
    dev = device_of(model)
    losses = []
    for _ in range(cfg.eval_batches):
        x, y, pos = (part or _whole)(*batch(ids, cfg.batch_size, cfg.block_size, generator))
        losses.append(model.loss(x.to(dev), y.to(dev), positions=pos).item())
    model.train()
    return sum(losses) / len(losses)


Window = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # inputs, targets (b, n), positions (n,) or None


def _whole(x: torch.Tensor, y: torch.Tensor) -> Window:
    return x, y, None


@torch.no_grad()
def _forward_seconds(model: GPT, x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor | None, rt: Runtime) -> float:
    """How long the loss of one batch takes in evaluation mode, as ``evaluate`` runs it (no gradients,
    no random number drawn): the faster of two timings, since the first call also pays its warm-up."""
    model.eval()
    times = []
    for _ in range(2):
        t = time.perf_counter()
        with rt.autocast():
            model.loss(x, y, positions=pos).item()
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


class LMTask(Step):
    """The character GPT as a ``fit`` task: random windows drawn from one batch generator (saved
    with each checkpoint), AdamW with warm-up and cosine decay, the next-character loss, the
    validation loss on every rank (it draws from the same generator), the vocabulary saved beside."""

    def __init__(self, text: str, cfg: LMTrainConfig, data: dict | None = None):
        self.cfg, self.data = cfg, data
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.vocab = Vocab.chars(text)
        self.train_ids, self.val_ids = split(self.vocab.encode_tensor(text), cfg.val_fraction, cfg.block_size)
        self.model = build_model(cfg, len(self.vocab))
        self.last = None  # the latest batch (x, y, positions): the evaluation's time is estimated on it
        self.part: Callable[[torch.Tensor, torch.Tensor], Window] | None = None  # one window across processes

    def optimizer(self):
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": self.cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=self.cfg.lr, betas=(0.9, 0.95))
        return self.opt

    def batch(self, step: int, rt: Runtime):
        for g in self.opt.param_groups:
            g["lr"] = _lr(step, self.cfg)
        x, y = batch(self.train_ids, self.cfg.batch_size, self.cfg.block_size, self.gen)
        if self.part is not None:  # every rank the same windows, each its positions of them
            x, y, pos = self.part(x, y)
            self.last = (*rt.to(x, y), pos)
            return self.last, True
        rows, real = rt.world.shard_or_stand_in(list(range(self.cfg.batch_size)))  # this rank's rows
        self.last = (*rt.to(x[rows], y[rows]), None)
        return self.last, real

    def loss_sum(self, net, xyp):
        x, y, pos = xyp
        return _loss_sum(net(x, positions=pos), y), y.numel()

    def split_windows(self, rt: Runtime) -> None:
        """Split every window across the processes (``cfg.context_parallel`` of them, all of ``rt``'s):
        each rank holds ``block_size / W`` positions of each and attends over all of them
        (``GPT.context_parallel``, in a process group of its own)."""
        import torch.distributed as dist

        from ..distributed import positions

        w, layout = self.cfg.context_parallel, self.cfg.cp_layout
        if rt.world.size != w:
            raise ValueError(f"context_parallel={w} splits each window across all processes: run it under "
                             f"torchrun with --nproc-per-node {w}; got {rt.world.size} process(es)")
        self.model.context_parallel(dist.new_group(list(range(w))), mode=self.cfg.cp_mode, layout=layout)
        pos = positions(self.cfg.block_size, w, rt.world.rank, layout)
        self.part = lambda x, y: (x[:, pos], y[:, pos], pos.to(rt.device))

    def evaluate(self, rt: Runtime) -> dict:
        loss = evaluate(self.model, self.val_ids, self.cfg, self.gen, self.part)  # every rank: the generators stay equal
        return {"loss": loss if self.part is None else rt.world.mean(loss)}

    def eval_seconds(self, rt: Runtime) -> float:
        return self.cfg.eval_batches * _forward_seconds(self.model, *self.last, rt)

    def records(self, step: int, train: dict | None, valid: dict) -> list[dict]:
        if not train:
            return []
        return [{"step": step, "train_loss": round(train["loss"], 4), "val_loss": round(valid.get("loss", math.nan), 4),
                 "tokens_per_second": round(train["tokens_per_s"], 1),
                 **({"skipped": train["skipped"]} if "skipped" in train else {})}]

    def lines(self, step: int, train: dict | None, valid: dict) -> list[str]:
        return [f"step {step:>5}  train {train['loss']:.4f}  val {valid.get('loss', math.nan):.4f}  "
                f"{train['tokens_per_s']:,.0f} tokens/s"] if train else []

    def checkpoint(self, step: int, records: list[dict]):
        config = {"kind": "char-lm", "train": asdict(self.cfg), **({"data": self.data} if self.data is not None else {})}
        return {"rng.batches": self.gen.get_state()}, config, {"vocab.json": self.vocab.to_json()}

    def restore(self, out: Path, tensors: dict, config: dict) -> int:
        if read_vocab(read_text(out, "vocab.json")).itos != self.vocab.itos:
            raise CheckpointError(f"--resume: the text has other characters than the run at {out} was trained on")
        if "state" not in config or "rng.batches" not in tensors:
            raise CheckpointError(f"--resume: {out} holds weights only (written before checkpoints kept the optimizer)")
        st = config["state"]
        if not isinstance(st, dict):
            raise CheckpointError(f"--resume: {out}/config.json: 'state' must be an object; got {type(st).__name__}")
        step = check_step(st.get("step"), f"--resume: {out}/config.json: state.step")
        ema = st.get("loss_ema")  # written by earlier versions
        if ema is not None and (isinstance(ema, bool) or not isinstance(ema, (int, float)) or not math.isfinite(ema)):
            raise CheckpointError(f"--resume: {out}/config.json: state.loss_ema must be a finite number; got {ema!r}")
        self.gen.set_state(tensors["rng.batches"])
        return step

    def fit_config(self) -> FitConfig:
        c = self.cfg
        return FitConfig(c.steps, c.eval_every, c.eval_every, c.save_every, 1.0, c.max_seconds, c.on_nonfinite, "train lm")


def train_lm(text: str, cfg: LMTrainConfig, out_dir: str | Path | None = None, *, log=None,
             runtime: Runtime | None = None, progress: bool = False, tensorboard: bool = False,
             resume: bool = False, stop_after: int | None = None, data: dict | None = None
             ) -> tuple[GPT, Vocab, TrainResult]:
    """Train a character GPT on ``text`` with ``train.fit.fit`` (``LMTask``); write a checkpoint to
    ``out_dir`` if given (``data``: where the text came from, kept in its config so that later
    commands find the held-out part again).

    ``runtime``: device, precision and torchrun's processes (``train.runtime``; default one CPU
    process in float32). ``progress``: a tqdm bar on a terminal. ``log``: called with each line.
    Checkpoints every ``cfg.save_every`` steps and at the end hold the optimizer and every
    generator too, so ``resume=True`` continues the run in ``out_dir`` exactly (with any number
    of processes); ``stop_after`` stops after that many steps without saving, as if killed."""
    torch.manual_seed(cfg.seed)
    task = LMTask(text, cfg, data)
    runtime = runtime or Runtime()
    if cfg.context_parallel > 1:
        task.split_windows(runtime)
    result = fit(task, task.fit_config(), runtime, out_dir, resume=resume, stop_after=stop_after, progress=progress,
                 log=log, tensorboard=tensorboard)
    if cfg.context_parallel > 1:
        task.model.whole_sequence()  # the trained model runs in one process again
    return task.model, task.vocab, result


__all__ = ["LMTrainConfig", "TrainResult", "LMTask", "train_lm", "batch", "split", "evaluate"]
