"""Train the emoji captioner, save and load it, and caption one image.

``train_captioner(cfg)`` reads the Twemoji images and their CLDR names
(``attnlab.data.emoji``), trains ``attnlab.models.captioner.Captioner`` with
teacher forcing (cross-entropy, padding ignored) and Adam, and returns the
model, the vocabulary and the loss history. ``save_captioner`` writes a
checkpoint folder (``model.safetensors``, ``config.json``, ``vocab.json``)
through ``attnlab.train.checkpoint``; ``load_captioner`` reads it back.
``caption_image`` returns the words and, per word, the attention over the
g×g regions (each map sums to 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..data.emoji import BOS, EOS, PAD, Vocab, join_tokens, load_emoji_items, read_image, tokenize
from ..models.captioner import Captioner, CaptionerConfig
from .checkpoint import CheckpointError, load_checkpoint, read_text, save_checkpoint


@dataclass
class CaptionTrainConfig:
    lang: str = "en"  # en | fr | de | zh
    limit: int | None = None  # a seeded random sample of n images (None: all, about 3,950)
    image_size: int = 32
    d_model: int = 64
    num_heads: int = 1
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-2
    seed: int = 0


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
    items = load_emoji_items(cfg.lang)
    if cfg.limit is not None and cfg.limit < len(items):  # a seeded sample, in code-point order
        keep = np.sort(np.random.default_rng(cfg.seed).choice(len(items), cfg.limit, replace=False))
        items = [items[i] for i in keep]
    if not items:
        raise ValueError(f"no captioned emoji images found for lang={cfg.lang!r}")
    images = torch.from_numpy(np.stack([read_image(it.path, cfg.image_size) for it in items]))
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
) -> list[float]:
    """Teacher-forced training; returns the mean loss of each epoch."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    history = []
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(len(images), generator=g)
        total, n = 0.0, 0
        for i in range(0, len(images), batch_size):
            idx = order[i : i + batch_size]
            logits, _ = model(images[idx], inp[idx])
            loss = F.cross_entropy(logits.flatten(0, 1), tgt[idx].flatten(), ignore_index=0)  # 0 = <pad>
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total, n = total + float(loss.detach()) * len(idx), n + len(idx)
        history.append(total / n)
        if log:
            log(f"  epoch {epoch + 1}/{epochs}: loss {history[-1]:.3f}")
    model.eval()
    return history


def train_captioner(
    cfg: CaptionTrainConfig, log: Callable[[str], None] | None = print
) -> tuple[Captioner, Vocab, list[float]]:
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    images, captions, _ = load_corpus(cfg)
    vocab = Vocab.build(captions)
    mcfg = CaptionerConfig(vocab_size=len(vocab), image_size=cfg.image_size, d_model=cfg.d_model,
                           num_heads=cfg.num_heads, max_len=max(len(c) for c in captions) + 1)
    model = Captioner(mcfg)
    inp, tgt = encode_captions(captions, vocab, mcfg.max_len)
    if log:
        log(f"caption: {len(images)} images, {len(vocab)} tokens ({cfg.lang}), {mcfg.grid}×{mcfg.grid} regions")
    history = fit(model, images, inp, tgt, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                  seed=cfg.seed, log=log)
    if log:
        log(f"trained in {time.perf_counter() - t0:.1f} s")
    return model, vocab, history


def save_captioner(directory: str | Path, model: Captioner, vocab: Vocab, train_cfg: CaptionTrainConfig) -> Path:
    config = {"kind": "captioner", "lang": train_cfg.lang, "model": model.config.to_dict(), "train": asdict(train_cfg)}
    return save_checkpoint(directory, model.state_dict(), config, files={"vocab.json": vocab.to_json()})


def load_captioner(directory: str | Path) -> tuple[Captioner, Vocab, dict]:
    tensors, config, path = load_checkpoint(directory)
    if config.get("kind") != "captioner":
        raise CheckpointError(f"{path} holds a {config.get('kind', 'unknown')!r} checkpoint, not a captioner")
    m = dict(config["model"])
    m["widths"] = tuple(m["widths"])
    model = Captioner(CaptionerConfig(**m))
    try:
        model.load_state_dict(tensors)
    except RuntimeError as e:
        raise CheckpointError(f"{path}: the weights do not fit the captioner of config.json ({e})") from None
    model.eval()
    return model, Vocab.from_json(read_text(path, "vocab.json")), config


def caption_image(
    model: Captioner, vocab: Vocab, image: np.ndarray | torch.Tensor, lang: str = "en"
) -> tuple[str, list[str], np.ndarray]:
    """(caption, words, weights (len(words), g, g)): one region map per word, each summing to 1."""
    x = torch.as_tensor(image, dtype=torch.float32)[None]  # (1, 3, S, S)
    tokens, weights = model.generate(x, vocab.stoi[BOS], vocab.stoi[EOS])
    words = vocab.decode(tokens[0].tolist())
    g = model.config.grid
    maps = weights[0, : len(words)].reshape(len(words), g, g).numpy()
    return join_tokens(words, lang), words, maps


__all__ = ["CaptionTrainConfig", "train_captioner", "save_captioner", "load_captioner", "caption_image",
           "encode_captions", "load_corpus", "fit"]
