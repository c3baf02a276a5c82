"""``attnlab view``: an offline interactive HTML page (or a PNG/SVG picture) of attention weights.

    attnlab view --example tutorial2-multi-head -o heads.html
    attnlab view --file my-example.toml -o page.html --picture weights.png
    attnlab view --json attention.json -o page.html     # {"tokens": [...], "layers": [[[[...]]]]}
    attnlab view --example tutorial2-multi-head -o heads.html --focus 2     # opens on the 2nd token
    attnlab view --example tutorial2-multi-head -o heads.html --screenshot heads.png --screenshot-view matrix --focus 2
    attnlab view --hf ./bert-tiny --text "the cat sat" -o bert.html   # a local Hugging Face model (safetensors)
    attnlab view --pretrained de-en --text "Das Wetter ist sehr schön." -o page.html   # a shipped model

The page has all its script inline and needs no network. Numbers count from 1, as the page shows them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser(
        "view",
        help=help,
        description="Write an offline HTML page: hover or click a query token to see its weights over "
        "the keys, switch layer and head, toggle masked positions. The weights come from a worked "
        "example (its trace) or a JSON file: {\"tokens\": [...], \"layers\": layers × heads × q × k} "
        "or the output of `attnlab explain --format json`.",
        epilog="The page's address chooses what it opens on: page.html#view=matrix&layer=2&head=3&query=4 "
        "(view: head, model, neuron or matrix; layer, head and query count from 1, as the page shows them; a "
        "value out of range is ignored). --focus N writes query N into the page; an address given when "
        "opening it wins.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--example", help="a built-in worked example (see `attnlab explain --list`)")
    src.add_argument("--file", help="a worked-example TOML file")
    src.add_argument("--json", help="a JSON file of weights or an explain --format json document")
    src.add_argument("--hf", metavar="MODEL_DIR", help="a local Hugging Face model folder (BERT-, GPT-2- or T5-style; "
                     "needs the hf extra); with --text")
    add_model_source(p, "an attnlab checkpoint folder (translator, GPT or captioner); with --text", group=src,
                     pretrained="a trained model that ships with attnlab (attnlab pretrained list); with --text")
    p.add_argument("--text", help="with --hf, --checkpoint or --pretrained: the text to run the model on "
                   "(a captioner: an image file; default its first shipped held-out scene)")
    p.add_argument("--target", help="with --hf and an encoder-decoder: the decoder's text (default: --text)")
    p.add_argument("-o", "--out", default="attention.html", help="the HTML page to write (default attention.html)")
    deprecated_alias(p, "--output", "--out")
    p.add_argument("--picture", help="also draw a PNG or SVG heatmap (or head grid) here (needs matplotlib)")
    p.add_argument("--screenshot", metavar="PNG", help="also photograph the page in headless chromium "
                   "(needs playwright and a chromium on the PATH)")
    p.add_argument("--screenshot-view", default="head", choices=("head", "model", "neuron", "matrix"),
                   help="the view to photograph (default head)")
    p.add_argument("--focus", type=int, metavar="N", help="open the page with query token N chosen, counted from 1 "
                   "as the page numbers them (the first token is 1), in every view and in the --screenshot")
    add_inference_device(p, what="run the --hf, --checkpoint or --pretrained model")
    p.set_defaults(func=run_view)


def run_view(args: argparse.Namespace) -> int:
    from ..viz.viewer import from_example, load_json, write_html

    if not args.out.endswith((".html", ".htm")):
        raise UsageError(f"--out must be an .html file; got {args.out!r}")
    if args.screenshot and not args.screenshot.endswith(".png"):
        raise UsageError(f"--screenshot must be a .png file; got {args.screenshot!r}")
    if args.focus is not None and args.focus < 1:
        raise UsageError(f"--focus counts from 1 (the first token is 1); got {args.focus}")
    if args.target is not None and not args.hf:
        raise UsageError("--target goes with --hf MODEL_DIR")
    if args.text is not None and not (args.hf or args.checkpoint):
        raise UsageError("--text goes with --hf MODEL_DIR, --checkpoint DIR or --pretrained NAME")
    if args.checkpoint:
        from ..viz.viewer import normalise
        from ._model_pages import model_page

        data = normalise(model_page(args.checkpoint, args.text, inference_runtime(args)))
    elif args.hf:
        if args.text is None:
            raise UsageError("--hf needs --text: the text to run the model on")
        if not Path(args.hf).is_dir():
            raise UsageError(f"no such model folder: {args.hf}")
        from ..viz.hf import load_and_run

        rt = inference_runtime(args)
        try:
            # (importing it registers attnlab's attention with transformers)
            from ..integrations.transformers import NAME

            with rt.autocast():
                data = load_and_run(args.hf, args.text, args.target, device=rt.device, attn_implementation=NAME)
        except ImportError:
            raise UsageError("viewing Hugging Face models needs transformers: pip install 'attnlab[hf]'") from None
    elif args.json:
        if not Path(args.json).is_file():
            raise UsageError(f"no such file: {args.json}")
        data = load_json(args.json)
    else:
        from ..explain import load, run

        ex = load(args.file or args.example)
        data = from_example(ex, run(ex))
    n = len(data["tokens"])
    if args.focus is not None and args.focus > n:
        raise UsageError(f"--focus counts from 1 and this page has {n} query tokens (1..{n}); got {args.focus}")
    out = write_html(data, args.out, start=None if args.focus is None else {"query": args.focus})
    print(f"wrote {out}")
    if args.picture:
        write_pictures(data, args.picture)
    if args.screenshot:
        from ..viz.screenshot import screenshot

        try:
            print(f"wrote {screenshot(out, args.screenshot, view=args.screenshot_view, focus=args.focus)}")
        except (ImportError, RuntimeError) as e:
            raise UsageError(str(e)) from None
    return 0


def write_pictures(data: dict, picture: str) -> None:
    """One picture per section (``name-encoder.png`` … when there are several), each ≤ 4,000 px a side."""
    from ..viz import heatmap, save
    from ..viz.heatmap import head_grid

    sections = data["sections"]
    path = Path(picture)
    for s in sections:
        out = path if len(sections) == 1 else path.with_name(f"{path.stem}-{s['name']}{path.suffix}")
        title = data["title"] if len(sections) == 1 else f"{data['title']}: {s['name']}"
        layers, masked = s["layers"], s.get("masked")
        if layers.shape[0] == 1 and layers.shape[1] == 1:
            fig = heatmap(layers[0, 0], s["key_tokens"], s["tokens"], title=title, xlabel=s["x_axis"],
                          ylabel=s["y_axis"], masked=None if masked is None else masked[0, 0])
        else:
            fig = head_grid(layers, s["key_tokens"], s["tokens"], title=title, masked=masked,
                            xlabel=s["x_axis"], ylabel=s["y_axis"])
        print(f"wrote {save(fig, out)}")
