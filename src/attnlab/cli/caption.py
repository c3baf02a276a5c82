"""``attnlab caption --checkpoint DIR IMAGE.png``: caption an image and draw where each word looked.

Prints the caption, then one line per word with the region it attended to most;
with ``--out`` (default ``caption-maps/``) writes ``NN_word.png`` per word: the
attention over the g×g regions drawn over the image (each map sums to 1).
Image rules (``attnlab.data.emoji.read_image``): RGB, L, RGBA, LA, P or PA
(transparency composited onto white); square; at least 8 pixels; resized to
the model's size. Other images, non-image files and missing checkpoints are
errors (exit 2).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..data.emoji import LANGS, read_image
from ..train.caption import caption_image, load_captioner
from . import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "caption",
        help="caption an image with a trained captioner and draw its attention per word",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("image", help="a PNG (or other image Pillow reads)")
    p.add_argument("--checkpoint", required=True, help="folder written by `attnlab train caption`")
    p.add_argument("--lang", choices=LANGS, help="check that the checkpoint captions in this language")
    p.add_argument("--out", default="caption-maps", help="folder for the per-word overlays (default caption-maps)")
    p.add_argument("--no-overlays", action="store_true", help="print the caption only")
    p.set_defaults(func=run_caption)


def _safe(word: str) -> str:
    return re.sub(r"[^\w-]+", "_", word, flags=re.UNICODE).strip("_")[:40] or "word"


def run_caption(args: argparse.Namespace) -> int:
    if not Path(args.checkpoint).exists():
        raise UsageError(f"no checkpoint at {args.checkpoint}; train one with `attnlab train caption --out DIR`")
    model, vocab, config = load_captioner(args.checkpoint)
    lang = config.get("lang", "en")
    if args.lang and args.lang != lang:
        raise UsageError(
            f"the checkpoint captions in {lang!r}, not {args.lang!r}; train one with "
            f"`attnlab train caption --lang {args.lang} --out DIR`"
        )
    if not Path(args.image).is_file():
        raise UsageError(f"no image file at {args.image}")
    image = read_image(args.image, model.config.image_size)
    text, words, maps = caption_image(model, vocab, image, lang)
    print(text)
    g = model.config.grid
    for i, (w, m) in enumerate(zip(words, maps), start=1):
        r, c = divmod(int(m.argmax()), g)
        print(f"  {i:2d} {w:<16} max weight {m.max():.3f} at region (row {r}, col {c}) of {g}×{g}")
    if not args.no_overlays and words:
        from ..experiments.overlays import save_word_overlay

        out = Path(args.out)
        for i, (w, m) in enumerate(zip(words, maps), start=1):
            save_word_overlay(image, m, w, out / f"{i:02d}_{_safe(w)}.png")
        print(f"wrote {len(words)} overlays to {out}/")
    return 0
