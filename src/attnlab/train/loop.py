"""Training translation models: the task ``Seq2SeqTask`` of the one loop ``train.fit.fit``.

Any registered model (``attnlab.models``, whose ``model_config`` its checkpoint keeps) with
``forward(src, src_mask, tgt_in) -> logits (b, t, V)`` and (for validation by decoding) the step
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from .._limits import check_fields, check_values
from ..data.batching import Example, batch_order, batches_in_order, collate, source_batch
from ..data.vocab import PAD
from .checkpoint import CheckpointError, read_text
from .finite import check_mode
from .fit import FitConfig, Step, TrainResult, fit
from .runtime import Runtime, device_of


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
    from .decode import greedy, length_guard

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
            guard = min(cfg.max_len, length_guard(len(t) for _, t in part))
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


class Seq2SeqTask(Step):
    """Translation as a ``fit`` task: the batches of step i a pure function of (seed, i)
    (``batch_order``), Adam, the teacher-forced loss, validation on rank 0, the vocabularies
    and the data's entries saved with each checkpoint."""

    def __init__(self, model, train_examples: Sequence[Example], valid_examples: Sequence[Example], cfg: TrainConfig,
                 extra: dict | None = None, files: dict[str, str] | None = None):
        if not train_examples:
            raise ValueError("no training examples")
        self.model, self.train_examples, self.valid_examples, self.cfg = model, train_examples, valid_examples, cfg
        self.extra, self.files = dict(extra or {}), dict(files or {})
        self.n_batches = len(batch_order(train_examples, cfg.batch_size, seed=cfg.seed, epoch=0))
        self.order, self.order_epoch = None, -1

    def optimizer(self):
        return torch.optim.Adam(self.model.parameters(), lr=self.cfg.lr)

    def batch(self, step: int, rt: Runtime):
        epoch, pos = divmod(step, self.n_batches)
        if epoch != self.order_epoch:
            self.order = batch_order(self.train_examples, self.cfg.batch_size, seed=self.cfg.seed, epoch=epoch)
            self.order_epoch = epoch
        mine, real = rt.world.shard_or_stand_in(self.order[pos])  # every rank draws the same global batch
        return collate([self.train_examples[i] for i in mine]).to(rt.device), real

    def loss_sum(self, net, batch):
        return loss_sum_on(net, batch)

    def evaluate(self, rt: Runtime) -> dict:
        return validate(self.model, self.valid_examples, self.cfg) if rt.is_main and self.valid_examples else {}

    def eval_seconds(self, rt: Runtime) -> float:
        return _validation_seconds(self.model, self.valid_examples, self.cfg, rt) if rt.is_main and self.valid_examples else 0.0

    def records(self, step: int, train: dict | None, valid: dict) -> list[dict]:
        return ([{"step": step, **train}] if train else []) + (
            [{"step": step, **{f"valid_{k}": v for k, v in valid.items()}}] if valid else [])

    def lines(self, step: int, train: dict | None, valid: dict) -> list[str]:
        out = [f"step {step}/{self.cfg.steps}  loss {train['loss']:.4f}  {train['tokens_per_s']:,.0f} tok/s"] if train else []
        return out + ([f"step {step}: {valid_words(valid)}"] if valid else [])

    def checkpoint(self, step: int, records: list[dict]):
        return {}, {"train": asdict(self.cfg), **self.extra}, dict(self.files)

    def restore(self, out: Path, tensors: dict, config: dict) -> int:
        for name in self.files:
            read_text(out, name)  # the vocabularies must be there too
        return super().restore(out, tensors, config)

    def fit_config(self, desc: str) -> FitConfig:
        c = self.cfg
        return FitConfig(c.steps, c.log_every, c.eval_every, c.save_every, c.clip, c.max_seconds, c.on_nonfinite, desc)


def train(model, train_examples: Sequence[Example], valid_examples: Sequence[Example], cfg: TrainConfig, *,
          out: str | Path | None = None, resume: bool = False, progress: bool = True, stop_after: int | None = None,
          runtime: Runtime | None = None, desc: str = "train") -> TrainResult:
    """Train ``model`` for ``cfg.steps`` steps: ``train.fit.fit`` on a ``Seq2SeqTask`` (``attnlab train
    seq2seq`` builds its task itself, with the data's entries and the vocabularies); checkpoints go to
    ``out`` (a folder).

    ``resume=True`` continues from the checkpoint in ``out``. ``stop_after`` stops after that many
    steps *without* saving (as if the run were killed). ``runtime`` (``train.runtime.Runtime``):
    device, precision and torchrun's processes (default: one CPU process in float32). ``progress``:
    lines on stderr (a bar on a terminal); ``desc`` names the run in them (an experiment's model, say)."""
    torch.manual_seed(cfg.seed)
    task = Seq2SeqTask(model, train_examples, valid_examples, cfg)
    return fit(task, task.fit_config(desc), runtime, out, resume=resume, stop_after=stop_after, progress=progress,
               log=progress_lines if progress else None)


def progress_lines(msg: str) -> None:
    """A progress line on stderr (where the bar would be)."""
    print(msg, file=sys.stderr, flush=True)


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





__all__ = ["TrainConfig", "TrainResult", "Seq2SeqTask", "train", "progress_lines", "validate", "valid_words", "loss_on", "loss_sum_on", "train_config_from"]
