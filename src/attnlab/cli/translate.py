"""``attnlab translate --checkpoint DIR --text TEXT``: translate, and show the alignment.

    attnlab translate --checkpoint runs/de-en --text "vierhundertzwei"
    attnlab translate --checkpoint runs/de-en "vierhundertzwei" "dreizehn"    # the texts alone: a shortcut
    attnlab translate --checkpoint runs/de-en "vierhundertzwei" --picture align.png
    attnlab translate --checkpoint runs/de-en "vierhundertzwei" --attention-out attn.json
    attnlab view --json attn.json -o attn.html

For each output token the text alignment shows one shaded cell per source
token (darker = more weight, `█` ≥ 0.5) and the source token with the most weight.
For an RNN checkpoint the weights are the decoder's attention α_t; for a
Transformer checkpoint they are the cross-attention of the last decoder layer,
averaged over heads (the output says so).

``--attention-out FILE.json`` writes the first text's attention as the viewer's JSON
(``attnlab view --json FILE.json -o page.html``): for an RNN checkpoint the
decoder's attention onto the source (one section); for a Transformer checkpoint
every layer's and head's encoder self-attention, decoder self-attention and
cross-attention (three sections). The queries are the output tokens (the row of
``</s>`` too when the translation ended), the keys the source tokens (for the
decoder's self-attention: its inputs, ``<s>`` and the output before each step).
"""

from __future__ import annotations

import argparse
import sys

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source

SHADES = " ·░▒▓█"


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("translate", help=help,
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("texts", nargs="*", metavar="TEXT", help="more sentences to translate (a shortcut for --text)")
    p.add_argument("--text", action="append", help="a sentence to translate (repeatable)")
    add_model_source(p, "a folder written by attnlab train seq2seq")
    p.add_argument("--beam", type=int, default=1, help="beam size (default 1 = greedy)")
    p.add_argument("--max-len", type=int, default=200, help="the longest output (default 200 tokens)")
    p.add_argument("--picture", help="write the alignment heatmap of the first text to this PNG file")
    deprecated_alias(p, "--plot", "--picture")
    p.add_argument("--no-alignment", action="store_true", help="print the translations only")
    p.add_argument("--attention-out", metavar="FILE.json",
                   help="write the first text's attention weights as the viewer's JSON (attnlab view --json)")
    add_inference_device(p)
    p.set_defaults(func=run)


def shade(w: float) -> str:
    return SHADES[min(len(SHADES) - 1, int(round(w * 2 * (len(SHADES) - 1))))] if w < 0.5 else SHADES[-1]


def alignment_text(src_tokens: list[str], out_tokens: list[str], weights) -> str:
    lines = []
    shown = [t if t != " " else "␣" for t in src_tokens]
    width = max((len(t) for t in out_tokens), default=1)
    if all(len(t) == 1 for t in shown):
        lines.append(" " * (width + 2) + "".join(shown))
    for i, tok in enumerate(out_tokens):
        row = weights[i].tolist()
        j = max(range(len(row)), key=row.__getitem__)
        lines.append(f"{tok:>{width}}  " + "".join(shade(w) for w in row) + f"  ← {shown[j]!r} {row[j]:.2f}")
    return "\n".join(lines)


def plot_alignment(path: str, src_tokens: list[str], out_tokens: list[str], weights, title: str | None = None) -> None:
    from ..experiments._outputs import save_figure
    from ..viz.heatmap import pyplot_or_none

    plt = pyplot_or_none()
    if plt is None:
        raise UsageError("--picture needs matplotlib: pip install 'attnlab[viz]'")
    fig, ax = plt.subplots(figsize=(max(4, 0.3 * len(src_tokens) + 2), max(3, 0.3 * len(out_tokens) + 1.5)))
    ax.imshow(weights.numpy(), cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(src_tokens)), [t if t != " " else "␣" for t in src_tokens], rotation=90)
    ax.set_yticks(range(len(out_tokens)), out_tokens)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=8)
    save_figure(plt, fig, path)


def attention_document(model, src, src_mask, src_tokens: list[str], out_tokens: list[str], hyp, title: str) -> dict:
    """The viewer's JSON of one translation (src (1, s), src_mask (1, s), its hypothesis ``hyp``)."""
    import torch

    from ..data.vocab import BOS
    from ..models.transformer import attention_maps
    from ..viz.viewer import attention_json

    if hyp.weights is None:
        raise UsageError("this model has no attention (decoder 'none'): there are no weights to write")
    if getattr(model, "kind", None) != "transformer":  # the RNN's α_t: one layer, one head
        return {"title": title, "sections": [attention_json(
            out_tokens, hyp.weights[None, None], key_tokens=src_tokens, name="cross-attention (α_t)",
            y_axis="output token", x_axis="source token")]}
    t = len(out_tokens)  # the decoder's inputs: <bos>, then each output token but the last
    tgt_in = torch.tensor([[BOS, *hyp.tokens][:t]], device=src.device)  # (1, t)
    maps = attention_maps(model.transformer, src, tgt_in, src_mask=src_mask)
    maps = {k: v.float().cpu() for k, v in maps.items()}  # encoder (L, h, s, s), decoder (L, h, t, t), cross (L, h, t, s)
    dec_in = ["<s>", *out_tokens[: t - 1]]
    return {"title": title, "sections": [
        attention_json(src_tokens, maps["encoder"], name="encoder self-attention", y_axis="source token",
                       x_axis="source token"),
        attention_json(out_tokens, maps["decoder"], key_tokens=dec_in, name="decoder self-attention",
                       y_axis="output token", x_axis="decoder input", masked=torch.ones(t, t, dtype=torch.bool).triu(1)),
        attention_json(out_tokens, maps["cross"], key_tokens=src_tokens, name="cross-attention",
                       y_axis="output token", x_axis="source token"),
    ]}


def run(args: argparse.Namespace) -> int:
    from ..data import source_batch
    from ..data.vocab import tokenize
    from ..pretrained import input_notes, source_ids
    from ..train.decode import beam_search, greedy
    from ..train.load import load_model

    args.texts = [*(args.text or []), *args.texts]
    if not args.texts:
        raise UsageError("give the sentence to translate: --text TEXT (or TEXT after the options)")
    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1; got {args.beam}")
    if args.max_len < 1:
        raise UsageError(f"--max-len must be >= 1; got {args.max_len}")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind=("seq2seq", "transformer"))
    model, sv, tv, config = loaded.model, loaded.vocabs["src_vocab"], loaded.vocabs["tgt_vocab"], loaded.config
    ids = [source_ids(text, sv, config) for text in args.texts]  # the checks of attnlab.pretrained.translate
    src, mask = rt.to(*source_batch(ids))
    model.to(rt.device)
    with rt.autocast():
        hyps = greedy(model, src, mask, max_len=args.max_len) if args.beam == 1 else \
            beam_search(model, src, mask, beam=args.beam, max_len=args.max_len)
    for n, (text, h) in enumerate(zip(args.texts, hyps)):
        out_tokens = tv.tokens(h.tokens) + (["</s>"] if h.ended else [])
        print(f"{text.strip()} → {tv.decode(h.tokens)}" + ("" if h.ended else f"  (stopped at --max-len {args.max_len})"))
        for note in input_notes(text, len(ids[n]), config):  # after the line it is about, on stderr
            sys.stdout.flush()
            print(note, file=sys.stderr)
        if h.weights is not None and not args.no_alignment:
            if getattr(model, "alignment", None):
                print(f"(alignment: {model.alignment})")
            print(alignment_text(tokenize(text.strip(), sv.level), out_tokens, h.weights))
        if args.picture and n == 0:
            if h.weights is None:
                raise UsageError("this model has no attention (decoder 'none'): there is no alignment to plot")
            plot_alignment(args.picture, tokenize(text.strip(), sv.level), out_tokens, h.weights,
                           title=getattr(model, "alignment", None))
            print(f"wrote {args.picture}")
    if args.attention_out:
        import json

        from .._files import write_text

        text, h, s = args.texts[0].strip(), hyps[0], len(ids[0])
        out_tokens = tv.tokens(h.tokens) + (["</s>"] if h.ended else [])
        with rt.autocast():
            doc = attention_document(model, src[:1, :s], mask[:1, :s], tokenize(text, sv.level), out_tokens, h,
                                     title=f"{text} → {tv.decode(h.tokens)}")
        write_text(args.attention_out, json.dumps(doc, ensure_ascii=False))
        print(f"attention weights ({', '.join(x.get('name', '') for x in doc['sections'])}): {args.attention_out}")
    return 0
