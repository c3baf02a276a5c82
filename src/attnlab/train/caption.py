"""Train the captioner on emoji scenes (default) or single emoji, measure where it looks, save and load it.

``train_captioner(cfg)`` builds the data (``data="scenes"``: 1-3 Twemoji in a
3×3 grid, captioned by their names in reading order, ``attnlab.data.scenes``;
``data="emoji"``: one Twemoji per image captioned by its CLDR name,
``attnlab.data.emoji``), trains ``attnlab.models.captioner.Captioner`` with
teacher forcing (cross-entropy, padding ignored) and Adam (``CaptionTask``, a task of the
one loop ``train.fit.fit``), and on scenes
evaluates the held-out layouts with ``evaluate_scenes``:

* exact match: the generated caption equals the reference;
* attention accuracy: the fraction of generated words whose most-attended
  region (head-averaged map) lies in a cell of an object whose name holds
  that word (a word that names nothing in the scene counts as wrong);
* attention mass: the mean weight that a generated word puts inside those cells;
* chance: one cell's share of the regions (1/9 for 3×3 cells), what the
  accuracy would be for a map that ignores the image.

A region belongs to the cell that holds its centre. ``save_captioner`` writes a
checkpoint folder (``model.safetensors``, ``config.json``, ``vocab.json``);
``attnlab.train.load.load_model`` reads it back; ``caption_image`` returns the words with one
map per word (mean over heads) and the per-head maps.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .._files import write_text
from .._limits import check_fields, check_step
from ..data.emoji import BOS, EOS, PAD, join_tokens, load_emoji_items, read_image, tokenize
from ..data.scenes import SceneConfig, Scenes, make_split, save_png
from ..data.vocab import Vocab
from ..models import create_model
from ..models.captioner import Captioner, CaptionerConfig
from . import runlog
from .checkpoint import CheckpointError, save_checkpoint
from .finite import check_mode
from .fit import FitConfig, Step, fit, model_entry
from .runtime import Runtime, device_of

DATASETS = ("scenes", "emoji")
DEFAULT_WIDTHS = {"scenes": (16, 32, 64), "emoji": (32, 64, 64)}  # 48 px → 6×6 regions; 32 px → 4×4
DEFAULT_SIZE = {"scenes": 48, "emoji": 32}


@dataclass
class CaptionTrainConfig:
    data: str = "scenes"  # scenes | emoji
    lang: str = "en"  # en | fr | de | zh
    limit: int | None = None  # emoji: a seeded random sample of n images (None: all, about 3,950)
    n_train: int = 4000  # scenes: training layouts
    n_test: int = 500  # scenes: held-out layouts (never in training)
    cells: int = 3  # scenes: a cells×cells grid
    max_objects: int = 3  # scenes: 1…max_objects emoji per scene
    pool: int = 16  # scenes: how many different emoji
    image_size: int | None = None  # None: 48 for scenes, 32 for emoji
    widths: tuple[int, ...] | None = None  # encoder stages; None: DEFAULT_WIDTHS[data]
    d_model: int = 64
    num_heads: int = 2
    decoder: str = "gru"  # gru | transformer
    layers: int = 2  # transformer decoder layers
    epochs: int = 20
    batch_size: int = 32
    lr: float = 1e-2
    seed: int = 0
    on_nonfinite: str = "stop"  # a step with non-finite gradients: stop the run, or skip its update (train.finite)
    max_seconds: float | None = None  # wall-time budget, the closing probe and checkpoint included

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges of every field (attnlab._limits)
        check_mode(self.on_nonfinite)
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0; got {self.max_seconds}")

    def resolved(self) -> CaptionTrainConfig:
        if self.data not in DATASETS:
            raise ValueError(f"data must be one of {', '.join(DATASETS)}; got {self.data!r}")
        size = self.image_size or DEFAULT_SIZE[self.data]
        widths = tuple(self.widths) if self.widths else DEFAULT_WIDTHS[self.data]
        return CaptionTrainConfig(**{**asdict(self), "image_size": size, "widths": widths})

    def scene_config(self) -> SceneConfig:
        return SceneConfig(canvas=self.image_size or DEFAULT_SIZE["scenes"], cells=self.cells,
                           max_objects=self.max_objects, pool=self.pool, lang=self.lang)


@dataclass
class Caption:
    """One generated caption: text, words, maps (L, g, g) = mean over heads, head_maps (h, L, g, g)."""

    text: str
    words: list[str]
    maps: np.ndarray
    head_maps: np.ndarray = field(repr=False)


def encode_captions(captions: list[list[str]], vocab: Vocab, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder inputs (<bos> w_1 … w_n) and targets (w_1 … w_n <eos>), padded: (N, T) each."""
    t = max(len(c) for c in captions) + 1
    if t > max_len:
        captions = [c[: max_len - 1] for c in captions]
        t = max_len
    pad = vocab.stoi[PAD]
    inp = torch.full((len(captions), t), pad, dtype=torch.long)
    tgt = torch.full((len(captions), t), pad, dtype=torch.long)
    for i, c in enumerate(captions):
        ids = vocab.encode(c)
        inp[i, : len(ids) + 1] = torch.tensor([vocab.stoi[BOS], *ids])
        tgt[i, : len(ids) + 1] = torch.tensor([*ids, vocab.stoi[EOS]])
    return inp, tgt


def load_corpus(cfg: CaptionTrainConfig) -> tuple[torch.Tensor, list[list[str]], list[str]]:
    """The single-emoji corpus: images (N, 3, S, S), token lists, image keys."""
    size = cfg.image_size or DEFAULT_SIZE["emoji"]
    items = load_emoji_items(cfg.lang)
    if cfg.limit is not None and cfg.limit < len(items):  # a seeded sample, in code-point order
        keep = np.sort(np.random.default_rng(cfg.seed).choice(len(items), cfg.limit, replace=False))
        items = [items[i] for i in keep]
    if not items:
        raise ValueError(f"no captioned emoji images found for lang={cfg.lang!r}")
    images = torch.from_numpy(np.stack([read_image(it.path, size) for it in items]))
    return images, [tokenize(it.caption, cfg.lang) for it in items], [it.key for it in items]


class CaptionTask(Step):
    """The captioner as a ``fit`` task: each epoch a permutation of the images drawn from one batch
    generator, Adam with a one-cycle (cosine) learning rate, the teacher-forced loss; the loop
    logs, probes (``probe``, rank 0) and checkpoints once per epoch (``per_epoch`` steps)."""

    def __init__(self, model: Captioner, images: torch.Tensor, inp: torch.Tensor, tgt: torch.Tensor, *,
                 epochs: int, batch_size: int, lr: float, seed: int, probe: Callable[[int], str] | None = None):
        self.model, self.images, self.inp, self.tgt = model, images, inp, tgt
        self.epochs, self.batch_size, self.lr, self.probe = epochs, batch_size, lr, probe
        self.per_epoch = -(-len(images) // batch_size)
        self.gen = torch.Generator().manual_seed(seed)
        self.order, self.order_epoch, self.epoch_rng = None, -1, self.gen.get_state()
        self.checkpoint_extra: tuple[dict, dict] = ({}, {})  # what the caller adds to a checkpoint's config and files

    def optimizer(self):
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=self.lr, total_steps=self.epochs * self.per_epoch,
                                                         pct_start=0.1)
        return self.opt

    def batch(self, step: int, rt: Runtime):
        epoch, pos = divmod(step, self.per_epoch)
        if epoch != self.order_epoch:  # the generator's state before the epoch's draw: a checkpoint within it redraws it
            self.epoch_rng = self.gen.get_state()
            self.order, self.order_epoch = torch.randperm(len(self.images), generator=self.gen), epoch
        idx = self.order[pos * self.batch_size : (pos + 1) * self.batch_size]
        rows, real = rt.world.shard_or_stand_in(list(range(len(idx))))  # this rank's part of the global batch
        return rt.to(self.images[idx[rows]], self.inp[idx[rows]], self.tgt[idx[rows]]), real

    def loss_sum(self, net, batch):
        return _loss_sum(net, *batch)

    def after_step(self, step: int) -> None:
        self.sched.step()

    def evaluate(self, rt: Runtime) -> dict:
        if self.probe is None or not rt.is_main:
            return {}
        words = self.probe(self.order_epoch)
        self.model.train()
        return {"probe": words}

    def records(self, step: int, train: dict | None, valid: dict) -> list[dict]:
        return [{"step": step, "epoch": -(-step // self.per_epoch), **train}] if train else []

    def lines(self, step: int, train: dict | None, valid: dict) -> list[str]:
        if not train:
            return []
        return [f"epoch {-(-step // self.per_epoch)}/{self.epochs}: loss {train['loss']:.3f}{valid.get('probe', '')}"]

    def checkpoint(self, step: int, records: list[dict]):
        state = {"epoch": step // self.per_epoch, "history": history_of(records), "timing": timing_of(records),
                 "scheduler": self.sched.state_dict(),
                 "param_groups": [{k: v for k, v in group.items() if k != "params"} for group in self.opt.param_groups]}
        rng = self.gen.get_state() if step % self.per_epoch == 0 else self.epoch_rng
        config, files = self.checkpoint_extra
        return {"rng.batches": rng}, {**config, "state": state}, dict(files)

    def restore(self, out: Path, tensors: dict, config: dict) -> int:
        """A state that is not what this task writes is a ``CheckpointError`` naming it, not a crash."""
        where, state = "the checkpoint's config.json: state", config.get("state")
        if not isinstance(state, dict) or not _finite(state):
            raise CheckpointError(f"{where} must be an object of finite numbers (written by fit); got {str(state)[:80]}")
        epoch = check_step(state.get("epoch"), f"{where}.epoch")
        step = check_step(state.get("step", epoch * self.per_epoch), f"{where}.step")
        try:
            self.gen.set_state(tensors["rng.batches"])
            self.sched.load_state_dict(state["scheduler"])
            for group, saved in zip(self.opt.param_groups, state["param_groups"]):  # the schedule's lr and betas
                group.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
        except (KeyError, TypeError, AttributeError, RuntimeError, ValueError) as e:
            raise CheckpointError(f"{where} is not the state fit writes ({type(e).__name__}: {e})") from None
        return step

    def fit_config(self, on_nonfinite: str = "stop", max_seconds: float | None = None) -> FitConfig:
        e = self.per_epoch
        return FitConfig(self.epochs * e, e, e, e, 1.0, max_seconds, on_nonfinite, "train caption")


def history_of(records: list[dict]) -> list[float]:
    """The mean loss of each epoch, from the run log."""
    return [r["loss"] for r in records if "loss" in r]


def timing_of(records: list[dict]) -> list[dict]:
    """Each epoch's ``wall_s`` and ``tokens_per_s`` (and the steps skipped so far), from the run log."""
    return [{k: r[k] for k in ("wall_s", "tokens_per_s", "skipped") if k in r} for r in records if "loss" in r]


def _finite(obj) -> bool:
    """Every number in a JSON value is finite."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v) for v in obj)
    return True


def _loss_sum(net, images: torch.Tensor, inp: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cross-entropy summed over the caption tokens (padding ignored) and their count."""
    logits, _ = net(images, inp)  # (b, L, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt.flatten(), ignore_index=0, reduction="sum")  # 0 = <pad>
    return loss, int((tgt != 0).sum())


def region_cells(grid: int, cells: int) -> np.ndarray:
    """The cell (row-major index in a cells×cells grid) of each of the grid×grid regions: (grid²,)."""
    centre = (np.arange(grid) + 0.5) / grid
    rc = np.minimum((centre * cells).astype(int), cells - 1)
    return (rc[:, None] * cells + rc[None, :]).reshape(-1)


def evaluate_scenes(model: Captioner, vocab: Vocab, scenes: Scenes, cells: int, lang: str = "en",
                    batch_size: int = 256) -> dict:
    """Exact match, attention accuracy, attention mass and chance on ``scenes`` (see the module docstring)."""
    g = model.config.grid
    rcell = region_cells(g, cells)
    exact, hits, mass, n_words = 0, 0, 0.0, 0
    model.eval()
    for i in range(0, len(scenes), batch_size):
        x = torch.from_numpy(scenes.images[i : i + batch_size]).to(device_of(model))
        tokens, weights = model.generate(x, vocab.stoi[BOS], vocab.stoi[EOS])
        w = weights.mean(1).float().cpu().numpy()  # (b, L, n)
        for j in range(len(x)):
            words = vocab.tokens(tokens[j].tolist())
            ref, ref_cells = scenes.captions[i + j], scenes.token_cells[i + j]
            exact += words == ref
            for t, word in enumerate(words):
                ok = {c for r, c in zip(ref, ref_cells) if r == word}
                n_words += 1
                if ok:
                    inside = np.isin(rcell, list(ok))
                    hits += bool(inside[int(w[j, t].argmax())])
                    mass += float(w[j, t][inside].sum())
    return {"exact_match": exact / len(scenes), "attention_accuracy": hits / max(1, n_words),
            "attention_mass": mass / max(1, n_words), "chance": float(np.mean(rcell == 0)),
            "words": n_words, "scenes": len(scenes)}


def format_scores(s: dict) -> str:
    return (f"exact match {s['exact_match']:.1%}, attention accuracy {s['attention_accuracy']:.1%} "
            f"(chance {s['chance']:.1%}), attention mass in the right cell {s['attention_mass']:.1%} "
            f"over {s['words']} words of {s['scenes']} held-out scenes")


def train_captioner(
    cfg: CaptionTrainConfig, log: Callable[[str], None] | None = print, *, runtime: Runtime | None = None,
    progress: bool = False, out: str | Path | None = None, resume: bool = False, stop_after: int | None = None,
) -> tuple[Captioner, Vocab, list[float], dict]:
    """Train on ``cfg.data``; returns the model, vocabulary, loss history and a result dict
    (``scores``: held-out scene scores, ``test``: the held-out Scenes, both None for emoji; ``records``:
    the run log, one record per epoch; ``timing``: each epoch's wall time and tokens per second).

    With ``out``, rank 0 writes a checkpoint after every epoch (with the optimizer, the
    scheduler and the generators) and the final one (with the scores and held-out scenes);
    ``resume=True`` continues the run in ``out`` to its planned end (its own configuration)."""
    cfg = cfg.resolved()
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    test: Scenes | None = None
    if cfg.data == "scenes":
        train, test = make_split(cfg.n_train, cfg.n_test, cfg.scene_config(), seed=cfg.seed)
        images, captions = torch.from_numpy(train.images), train.captions
    else:
        images, captions, _ = load_corpus(cfg)
    vocab = Vocab.build(captions, "tokens")
    mcfg = CaptionerConfig(vocab_size=len(vocab), image_size=cfg.image_size, widths=cfg.widths,
                           d_model=cfg.d_model, num_heads=cfg.num_heads, decoder=cfg.decoder, layers=cfg.layers,
                           max_len=max(len(c) for c in captions) + 1)
    model = create_model(mcfg)
    inp, tgt = encode_captions(captions, vocab, mcfg.max_len)
    if log and (runtime is None or runtime.is_main):
        what = f"{len(images)} scenes (+{len(test)} held-out layouts)" if test is not None else f"{len(images)} images"
        log(f"caption: {what}, {len(vocab)} tokens ({cfg.lang}), {mcfg.grid}×{mcfg.grid} regions, "
            f"{mcfg.decoder} decoder, {mcfg.num_heads} heads, {sum(p.numel() for p in model.parameters()):,} parameters")
    probe = None
    if test is not None:
        sub = Scenes(test.images[:64], test.layouts[:64], test.captions[:64], test.token_cells[:64], test.names)

        def probe(epoch: int) -> str:
            s = evaluate_scenes(model, vocab, sub, cfg.cells, cfg.lang)
            return f"; first 64 held-out: exact {s['exact_match']:.0%}, attention acc {s['attention_accuracy']:.0%}"

    task = CaptionTask(model, images, inp, tgt, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed,
                       probe=probe if log else None)
    task.checkpoint_extra = ({k: v for k, v in _caption_config(model, cfg).items() if k != "model"},
                             {"vocab.json": vocab.to_json()})
    result = fit(task, task.fit_config(cfg.on_nonfinite, cfg.max_seconds), runtime, out, resume=resume,
                 stop_after=None if stop_after is None else stop_after * task.per_epoch, progress=progress,
                 log=(lambda msg: log("  " + msg)) if log else None)
    model.eval()
    history, timing = history_of(result.history), timing_of(result.history)
    main = runtime is None or runtime.is_main
    scores = evaluate_scenes(model, vocab, test, cfg.cells, cfg.lang) if test is not None and main else None
    seconds = time.perf_counter() - t0
    if log and main:
        log(f"trained in {seconds:.1f} s")
        if scores:
            log(f"validation: {format_scores(scores)}")
    return model, vocab, history, {"scores": scores, "test": test, "seconds": seconds, "timing": timing,
                                   "records": result.history}


def _caption_config(model: Captioner, train_cfg: CaptionTrainConfig, scores: dict | None = None) -> dict:
    """A captioner checkpoint's config.json entries (the training state aside)."""
    cfg = train_cfg.resolved()
    return {"kind": "captioner", "lang": cfg.lang, "data": cfg.data, "cells": cfg.cells if cfg.data == "scenes" else None,
            "model": model_entry(model), "train": {**asdict(cfg), "widths": list(cfg.widths)}, "scores": scores}


def save_captioner(directory: str | Path, model: Captioner, vocab: Vocab, train_cfg: CaptionTrainConfig,
                   scores: dict | None = None, examples: Scenes | None = None, n_examples: int = 8,
                   records: list[dict] | None = None) -> Path:
    """The trained model's checkpoint folder (weights, config, vocabulary and, with ``records``, the run
    log); with ``examples`` also ``test-scenes/NNN.png`` + ``scenes.json`` (held-out). The checkpoints
    a run writes while it trains (with what a resume needs) are ``train.fit``'s."""
    cfg = train_cfg.resolved()
    config = _caption_config(model, cfg, scores)
    files = {"vocab.json": vocab.to_json()}
    if records is not None:
        files[runlog.NAME] = runlog.jsonl(records)
    path = save_checkpoint(directory, dict(model.state_dict()), config, files=files)
    if examples is not None:
        d = path / "test-scenes"
        d.mkdir(exist_ok=True)
        truth = {}
        for i in range(min(n_examples, len(examples))):
            save_png(examples.images[i], d / f"{i:03d}.png")
            truth[f"{i:03d}.png"] = {"caption": examples.captions[i], "token_cells": examples.token_cells[i],
                                     "cells": cfg.cells}
        write_text(d / "scenes.json", json.dumps(truth, ensure_ascii=False, indent=1))
    return path


def caption_image(model: Captioner, vocab: Vocab, image: np.ndarray | torch.Tensor, lang: str = "en") -> Caption:
    """Greedy caption of one (3, S, S) image, with one region map per word (each summing to 1)."""
    x = torch.as_tensor(image, dtype=torch.float32)[None].to(device_of(model))  # (1, 3, S, S)
    tokens, weights = model.generate(x, vocab.stoi[BOS], vocab.stoi[EOS])
    words = vocab.tokens(tokens[0].tolist())
    g, h = model.config.grid, model.config.num_heads
    head_maps = weights[0, :, : len(words)].reshape(h, len(words), g, g).float().cpu().numpy()
    return Caption(join_tokens(words, lang), words, head_maps.mean(0), head_maps)


__all__ = ["CaptionTrainConfig", "CaptionTask", "Caption", "train_captioner", "save_captioner", "caption_image",
           "encode_captions", "load_corpus", "history_of", "timing_of", "evaluate_scenes", "region_cells", "format_scores", "DATASETS"]
