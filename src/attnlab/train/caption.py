"""Train the captioner on emoji scenes (default) or single emoji, measure where it looks, save and load it.

``train_captioner(cfg)`` builds the data (``data="scenes"``: 1-3 Twemoji in a
3×3 grid, captioned by their names in reading order, ``attnlab.data.scenes``;
``data="emoji"``: one Twemoji per image captioned by its CLDR name,
``attnlab.data.emoji``), trains ``attnlab.models.captioner.Captioner`` with
teacher forcing (cross-entropy, padding ignored) and Adam, and on scenes
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
from ..models import create_model, model_config
from ..models.captioner import Captioner, CaptionerConfig
from . import runlog
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .finite import FiniteGuard, check_mode
from .runtime import (
    Progress,
    Runtime,
    device_of,
    first_step_line,
    restore_training,
    training_tensors,
)

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

    def __post_init__(self):
        check_fields(self)  # types, finiteness and ranges of every field (attnlab._limits)
        check_mode(self.on_nonfinite)

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


def fit(
    model: Captioner,
    images: torch.Tensor,
    inp: torch.Tensor,
    tgt: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    seed: int,
    log: Callable[[str], None] | None = None,
    on_epoch: Callable[[int], str] | None = None,
    runtime: Runtime | None = None,
    progress: bool = False,
    on_checkpoint: Callable[[dict], None] | None = None,
    resume_from: tuple[dict, dict] | None = None,
    stop_after: int | None = None,
    timing: list[dict] | None = None,
    on_nonfinite: str = "stop",
) -> list[float]:
    """Teacher-forced training with a cosine learning rate; returns the mean loss of each epoch.

    ``runtime``: device, precision and torchrun's processes (each rank trains on its part of
    every global batch; the default is one CPU process in float32). ``on_checkpoint(state)``
    is called on rank 0 after every epoch with what a resume needs (``training_tensors`` of
    the model and optimizer plus the batch generator, the scheduler, the epoch, the history);
    ``resume_from=(tensors, state)`` continues from it; ``stop_after`` stops after that many
    epochs, as if the run were killed. ``on_nonfinite``: ``stop`` or ``skip`` a step with non-finite
    gradients (``train.finite``; read once per epoch, before its checkpoint). ``timing``: a list that gets each epoch's ``wall_s``
    (since the run began) and ``tokens_per_s`` (caption tokens of all ranks per second)."""
    rt = runtime or Runtime()
    net = rt.prepare(model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    per_epoch = (len(images) + batch_size - 1) // batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * per_epoch, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    history: list[float] = []
    first = 0
    if resume_from is not None:
        first, history = _resume_fit(model, opt, sched, g, *resume_from, timing)
    guard = FiniteGuard(opt, on_nonfinite, first_step=first * per_epoch)  # the optimizer, its gradients checked
    bar = Progress(epochs * per_epoch, initial=first * per_epoch, desc="train caption", enabled=progress and rt.is_main)
    clock = time.perf_counter() - (timing[-1]["wall_s"] if timing else 0.0)
    for epoch in range(first, epochs):
        if stop_after is not None and epoch >= stop_after:
            break
        t_epoch = time.perf_counter()
        model.train()
        order = torch.randperm(len(images), generator=g)
        total, n = 0.0, 0
        for i in range(0, len(images), batch_size):
            idx = order[i : i + batch_size]
            rows, real = rt.world.shard_or_stand_in(list(range(len(idx))))  # this rank's part of the global batch
            idx = idx[rows]
            x, a, y = rt.to(images[idx], inp[idx], tgt[idx])
            t_step = time.perf_counter()
            loss_sum, k = rt.step(net, guard, lambda x=x, a=a, y=y: _loss_sum(net, x, a, y), clip=1.0, real=real)
            if log and rt.is_main and epoch == first and i == 0:  # a line within seconds, not after an epoch
                msg = "  " + first_step_line(first * per_epoch + 1, epochs * per_epoch, float(loss_sum) / max(1, k),
                                             time.perf_counter() - t_step)
                bar.line(msg) if bar.tty else log(msg)
            sched.step()
            total, n = total + guard.keep(loss_sum, 0.0), n + k * guard.ok  # tensors: read once per epoch
            bar.update(epoch * per_epoch + i // batch_size + 1)
        skipped = guard.read()  # stops a non-finite run (on_nonfinite="stop") before its checkpoint
        history.append(rt.mean(float(total), int(n)))
        if timing is not None:
            timing.append({"wall_s": round(time.perf_counter() - clock, 3),
                           "tokens_per_s": round(rt.world.sum(int(n)) / max(1e-9, time.perf_counter() - t_epoch), 1),
                           **({"skipped": skipped} if skipped else {})})
        model.eval()
        if log and rt.is_main:
            extra = on_epoch(epoch) if on_epoch else ""
            msg = f"  epoch {epoch + 1}/{epochs}: loss {history[-1]:.3f}{extra}"
            bar.line(msg) if bar.tty else log(msg)
        if on_checkpoint is not None and rt.is_main:
            guard.check_weights(model)  # a non-finite model never overwrites the last good checkpoint
            on_checkpoint({"tensors": {**training_tensors(model, opt), "rng.batches": g.get_state()},
                           "state": {"epoch": epoch + 1, "history": history, "timing": timing or [],
                                     "scheduler": sched.state_dict(),
                                     "param_groups": [{k: v for k, v in group.items() if k != "params"}
                                                      for group in opt.param_groups]}})
    bar.close()
    model.eval()
    return history


def _finite(obj) -> bool:
    """Every number in a JSON value is finite."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_finite(v) for v in obj)
    return True


def _resume_fit(model, opt, sched, g: torch.Generator, tensors: dict, state: dict,
                timing: list[dict] | None) -> tuple[int, list[float]]:
    """Load a ``fit`` checkpoint's tensors and state; returns (the epochs done, the loss history).
    A state that is not what ``fit`` writes is a ``CheckpointError`` naming it, not a crash."""
    where = "the checkpoint's config.json: state"
    if not isinstance(state, dict) or not _finite(state):
        raise CheckpointError(f"{where} must be an object of finite numbers (written by fit); got {str(state)[:80]}")
    epoch = check_step(state.get("epoch"), f"{where}.epoch")
    restore_training(model, opt, tensors, "the checkpoint")
    try:
        g.set_state(tensors["rng.batches"])
        sched.load_state_dict(state["scheduler"])
        for group, saved in zip(opt.param_groups, state["param_groups"]):  # the schedule's lr and betas
            group.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
        history = [float(v) for v in state["history"]]
    except (KeyError, TypeError, AttributeError, RuntimeError, ValueError) as e:
        raise CheckpointError(f"{where} is not the state fit writes ({type(e).__name__}: {e})") from None
    if timing is not None:
        timing[:] = state.get("timing", [])
    return epoch, history


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
    (``scores``: held-out scene scores, ``test``: the held-out Scenes; both None for emoji).

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

    resume_from, timing = None, []  # timing: each epoch's wall time and tokens per second
    if resume:
        tensors, config, _ = load_checkpoint(out)
        if config.get("model") != model_config(model) or "state" not in config:
            raise CheckpointError(f"--resume: {out} is not a checkpoint of this run (another model, or weights only)")
        resume_from = (tensors, config["state"])

    def checkpoint(st: dict) -> None:
        save_captioner(out, model, vocab, cfg, history=st["state"]["history"], training=(st["tensors"], st["state"]),
                       timing=st["state"]["timing"])

    history = fit(model, images, inp, tgt, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                  seed=cfg.seed, log=log, on_epoch=probe, runtime=runtime, progress=progress,
                  on_checkpoint=checkpoint if out is not None else None, resume_from=resume_from,
                  stop_after=stop_after, timing=timing, on_nonfinite=cfg.on_nonfinite)
    main = runtime is None or runtime.is_main
    scores = evaluate_scenes(model, vocab, test, cfg.cells, cfg.lang) if test is not None and main else None
    seconds = time.perf_counter() - t0
    if log and main:
        log(f"trained in {seconds:.1f} s")
        if scores:
            log(f"validation: {format_scores(scores)}")
    return model, vocab, history, {"scores": scores, "test": test, "seconds": seconds, "timing": timing}


def epoch_records(history: list[float], train_cfg: CaptionTrainConfig, timing: list[dict] | None = None) -> list[dict]:
    """The run log: one record per epoch, its step the epoch's last optimizer step (scenes) or the epoch,
    with the epoch's ``wall_s`` and ``tokens_per_s`` where ``timing`` has them."""
    cfg = train_cfg.resolved()
    steps = -(-cfg.n_train // cfg.batch_size) if cfg.data == "scenes" else None
    timing = timing or []
    return [{"step": (e + 1) * steps if steps else e + 1, "epoch": e + 1, "loss": loss,
             **(timing[e] if e < len(timing) else {})} for e, loss in enumerate(history)]


def save_captioner(directory: str | Path, model: Captioner, vocab: Vocab, train_cfg: CaptionTrainConfig,
                   scores: dict | None = None, examples: Scenes | None = None, n_examples: int = 8,
                   history: list[float] | None = None, training: tuple[dict, dict] | None = None,
                   timing: list[dict] | None = None) -> Path:
    """The checkpoint folder; with ``examples`` also ``test-scenes/NNN.png`` + ``scenes.json`` (held-out);
    with ``training=(tensors, state)`` what ``fit`` needs to resume (a ``fit`` checkpoint)."""
    cfg = train_cfg.resolved()
    config = {"kind": "captioner", "lang": cfg.lang, "data": cfg.data, "cells": cfg.cells if cfg.data == "scenes" else None,
              "model": model_config(model), "train": {**asdict(cfg), "widths": list(cfg.widths)},
              "scores": scores}
    files = {"vocab.json": vocab.to_json()}
    if history is not None:
        files[runlog.NAME] = runlog.jsonl(epoch_records(history, cfg, timing))
    tensors = dict(model.state_dict())
    if training is not None:
        tensors, config["state"] = training
    path = save_checkpoint(directory, tensors, config, files=files)
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


__all__ = ["CaptionTrainConfig", "Caption", "train_captioner", "save_captioner", "caption_image",
           "encode_captions", "load_corpus", "fit", "epoch_records", "evaluate_scenes", "region_cells", "format_scores", "DATASETS"]
