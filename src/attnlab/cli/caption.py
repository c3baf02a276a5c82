"""``attnlab caption --checkpoint DIR IMAGE.png``: caption an image and draw where each word looked.

Prints the caption, then one line per word with the region it attended to most
(the mean over heads) and, for a checkpoint trained on scenes, the cell of the
scene's grid that region lies in and the weight inside that cell. When the
image sits next to a ``scenes.json`` (as in the ``DIR/test-scenes/`` folder that
``attnlab train caption`` writes) the reference caption is printed too, and
each word is marked right or wrong: does it look at its own emoji's cell?
With ``--out DIR`` it also writes ``NN_word.png`` per word and ``caption.png``
(the image and every word's map, averaged over heads, on one row), and with
several heads ``caption_heads.png`` (a row per head); without it nothing is written.
``--attention-out FILE.json`` writes every head's cross-attention as the viewer's JSON
(``attnlab view --json FILE.json -o page.html``): the queries are the words, the keys
the cells of the model's region grid, ``r1c1`` (row 1, column 1, counted from the
top left) to ``rGcG``.
Image rules (``attnlab.data.emoji.read_image``): RGB, L, RGBA, LA, P or PA
(transparency composited onto white); square; at least 8 pixels; resized to
the model's size. Other images, non-image files and missing checkpoints are
errors (exit 2).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source
from ._static import constant

if TYPE_CHECKING:
    import numpy as np


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser(
        "caption",
        help=help,
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("image", nargs="?", help="a PNG (or other image Pillow reads); default: the first held-out "
                   "scene that ships with the checkpoint (test-scenes/000.png)")
    add_model_source(p, "folder written by `attnlab train caption`")
    p.add_argument("--caption-lang", choices=constant("data.emoji", "LANGS"),
                   help="check that the checkpoint captions in this language")
    deprecated_alias(p, "--lang", "--caption-lang")
    p.add_argument("--out", help="write the per-word overlays to this folder (default: print only, write nothing)")
    p.add_argument("--no-overlays", action="store_true", help="print the caption only, even with --out")
    p.add_argument("--attention-out", metavar="FILE.json",
                   help="write the words' attention onto the region grid as the viewer's JSON (attnlab view --json)")
    add_inference_device(p)
    p.set_defaults(func=run_caption)


def _safe(word: str) -> str:
    return re.sub(r"[^\w-]+", "_", word, flags=re.UNICODE).strip("_")[:40] or "word"


def _truth(image: Path) -> dict | None:
    """The image's reference from a scenes.json beside it, if there is one."""
    f = image.parent / "scenes.json"
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8")).get(image.name)
    except (ValueError, AttributeError):
        raise UsageError(f"{f} is not a scenes.json written by `attnlab train caption`") from None


def attention_document(cap, grid: int) -> dict:
    """The viewer's JSON of a caption: one layer, every head, words × the grid's cells (r1c1 … rGcG)."""
    from ..viz.viewer import attention_json

    if not cap.words:
        raise UsageError("the caption is empty: there are no words whose attention could be written")
    h = cap.head_maps.shape[0]
    cells = [f"r{r + 1}c{c + 1}" for r in range(grid) for c in range(grid)]
    maps = cap.head_maps.reshape(1, h, len(cap.words), grid * grid)  # (1, h, words, cells)
    return {"title": f"“{cap.text}”", "sections": [attention_json(
        cap.words, maps, key_tokens=cells, name="cross-attention onto the image grid",
        y_axis="word", x_axis="grid cell (row, column)")]}


def run_caption(args: argparse.Namespace) -> int:
    from ..data.emoji import read_image
    from ..train.caption import caption_image

    rt, loaded = _load(args)
    model, vocab, config = loaded.model.to(rt.device), loaded.vocabs["vocab"], loaded.config
    lang = config.get("lang", "en")
    path = _image_path(args, loaded.path)
    image = read_image(path, model.config.image_size)
    with rt.autocast():
        cap = caption_image(model, vocab, image, lang)  # on the model's device; the maps come back as NumPy
    print(cap.text)
    g, cells = model.config.grid, config.get("cells")
    _print_words(cap, g, cells, _truth(path), lang)
    if args.out is not None and not args.no_overlays and cap.words:
        _write_overlays(Path(args.out), image, cap, cells)
    if args.attention_out:
        from .._files import write_text

        write_text(args.attention_out, json.dumps(attention_document(cap, g), ensure_ascii=False))
        print(f"attention weights ({len(cap.words)} words × {g * g} cells, {cap.head_maps.shape[0]} heads): "
              f"{args.attention_out}")
    return 0


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the inference runtime, the loaded captioner), its language checked against ``--lang``."""
    from ..train.checkpoint import exists
    from ..train.load import load_model

    if not exists(args.checkpoint):  # the folder, or a save's complete leftover while it is moved aside
        raise UsageError(f"no checkpoint at {args.checkpoint}; train one with `attnlab train caption --out DIR`")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind="captioner")
    lang = loaded.config.get("lang", "en")
    if args.caption_lang and args.caption_lang != lang:
        raise UsageError(
            f"the checkpoint captions in {lang!r}, not {args.caption_lang!r}; train one with "
            f"`attnlab train caption --caption-lang {args.caption_lang} --out DIR`"
        )
    return rt, loaded


def _image_path(args: argparse.Namespace, model_dir: str | Path) -> Path:
    """The image named, or the held-out scene that ships with the model (announced)."""
    path = Path(args.image) if args.image else Path(model_dir) / "test-scenes" / "000.png"
    if not args.image:
        if not path.is_file():
            raise UsageError(f"{model_dir} ships no held-out scene (test-scenes/000.png): name an image to caption")
        print(f"image: {path} (a held-out scene that ships with the model)")
    if not path.is_file():
        raise UsageError(f"no image file at {args.image}")
    return path


def _print_words(cap: Any, g: int, cells: int | None, truth: dict | None, lang: str) -> None:
    """The reference caption (if known), one line per word (its region, its scene cell, right or wrong),
    then the attention accuracy."""
    from ..data.emoji import join_tokens
    from ..train.caption import region_cells

    if truth:
        print(f"reference: {join_tokens(truth['caption'], lang)}")
    rcell = region_cells(g, cells) if cells else None
    hits = 0
    for i, (w, m) in enumerate(zip(cap.words, cap.maps), start=1):
        r, c = divmod(int(m.argmax()), g)
        line = f"  {i:2d} {w:<12} region (row {r + 1}, col {c + 1}) of {g}×{g}, weight {m.max():.3f}"
        if rcell is not None:
            cell = int(rcell[m.argmax()])
            line += f"; cell (row {cell // cells + 1}, col {cell % cells + 1}) of {cells}×{cells}"
            line += f", mass {float(m.reshape(-1)[rcell == cell].sum()):.2f}"
            if truth:
                ok = {tc for t, tc in zip(truth["caption"], truth["token_cells"]) if t == w}
                right = cell in ok
                hits += right
                line += "  ✓ on its emoji" if right else ("  ✗ (its emoji: cell " + ", ".join(
                    f"row {k // cells + 1}, col {k % cells + 1}" for k in sorted(ok)) + ")" if ok else "  ✗ (not in the scene)")
        print(line)
    if truth and cap.words:
        print(f"attention accuracy on this image: {hits}/{len(cap.words)}; "
              f"exact match: {'yes' if cap.words == truth['caption'] else 'no'}")


def _write_overlays(out: Path, image: np.ndarray, cap: Any, cells: int | None) -> None:
    """``NN_word.png`` per word, ``caption.png`` and, with several heads, ``caption_heads.png`` in ``out``."""
    import numpy as np

    from .._files import claim
    from ..viz.overlays import save_caption_strip, save_overlay_grid, save_word_overlay

    words = [f"{i:02d}_{_safe(w)}.png" for i, w in enumerate(cap.words, start=1)]
    claim(out, [*words, "caption.png", *(["caption_heads.png"] if cap.head_maps.shape[0] > 1 else [])])  # never a file of yours
    for name, w, m in zip(words, cap.words, cap.maps):
        save_word_overlay(image, m, w, out / name, cells=cells)
    save_caption_strip(image, np.asarray(cap.maps), cap.words, out / "caption.png", cells=cells,
                       title=f"“{cap.text}”")
    extra = ""
    if cap.head_maps.shape[0] > 1:  # one row per head: what each head looked at for each word
        save_overlay_grid([image] * cap.head_maps.shape[0], [list(h) for h in cap.head_maps],
                          out / "caption_heads.png", column_titles=["image", *cap.words],
                          row_titles=[f"head {i + 1}" for i in range(cap.head_maps.shape[0])])
        extra = " and caption_heads.png"
    print(f"wrote {len(cap.words)} overlays, caption.png{extra} to {out}/")
