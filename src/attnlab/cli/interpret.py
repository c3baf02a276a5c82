"""``attnlab interpret rollout|flow|heads``: attention rollout or flow of a stack of layers; head importance.

    attnlab interpret rollout --json attention.json                  # prints the (n, n) matrix
    attnlab interpret flow --json attention.json --picture flow.png  # and draws it
    attnlab interpret flow --json attention.json --last 64           # the last 64 tokens only
    attnlab interpret rollout --json attention.json --tokens 1:20    # tokens 1 to 20 only
    attnlab interpret rollout --json attention.json --head-fusion max --no-residual
    attnlab interpret rollout --hf ./tiny-llama --text "the cat sat"  # a Hugging Face model, run once
    attnlab interpret heads --checkpoint runs/tf --picture ablation.png  # a translator run (its test split)
    attnlab interpret heads --checkpoint runs/lm --text input.txt        # a GPT run, on this text

The JSON is the viewer's: {"tokens": [...], "layers": layers × heads × q × k} (what
``attnlab.viz.viewer.attention_json`` writes). Row i of the result: how much output token i
draws from each input token, through every layer (Abnar & Zuidema 2020). Up to 16 tokens the
whole matrix is printed; beyond, each row's 5 largest entries (``--picture`` draws it all).
``--hf MODEL_DIR --text T`` reads the weights of a local Hugging Face model instead, from one
forward pass through attnlab's own attention (``attn_implementation="attnlab"``).

``heads`` (Michel et al. 2019) prints every head's importance |∂L/∂ξ| (the loss's derivative in
a gate on the head) for each attention module of the run's model, then the loss as heads are
removed, least important first; ``--picture`` draws that curve. The loss is the mean cross-entropy
on ``--limit`` test sentences (a translator run) or text windows (a GPT run, ``--text``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._runtime import add_inference_device, inference_runtime
from ._source import add_model_source, check_hf_source
from ._threads import apply_threads
from ._types import Span, positive_int, token_span

MAX_FLOW_TOKENS = 64
MAX_PRINTED_TOKENS = 16  # beyond, each row's TOP largest entries are printed
TOP = 5



def save_figure(fig, path):
    """``attnlab.viz.heatmap.save`` (written whole, then renamed), imported only when a figure is written."""
    from ..viz.heatmap import save

    return save(fig, path)

def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("interpret", help=help,
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method", choices=["rollout", "flow", "heads"],
                   help="rollout (products of layers), flow (max-flow) or heads (importance and ablation)")
    p.add_argument("--json", help='rollout/flow: the viewer\'s JSON: {"tokens": [...], "layers": layers × heads × q × k}')
    add_model_source(p, "heads: a checkpoint folder of a Transformer translator or a GPT", required=False)
    deprecated_alias(p, "--run", "--checkpoint")
    p.add_argument("--hf", metavar="MODEL_DIR", help="rollout/flow: a local Hugging Face model folder (needs the hf "
                   "extra), run once on --text through attnlab's attention, instead of --json")
    p.add_argument("--text", help="heads on a GPT run: a UTF-8 text file to measure the loss on (default: the "
                   "part of its training text that training held out: the plays, or the file it was trained on); "
                   "rollout/flow with --hf: the text to run the model on")
    p.add_argument("--split", choices=("test", "valid"), default="test", help="heads on a translator: the split")
    p.add_argument("--limit", type=positive_int, default=64, help="heads: sentences or text windows (default 64)")
    p.add_argument("--data-path", help="heads on a translator: the Ding file, if not where training found it")
    p.add_argument("--head-fusion", default="mean", choices=["mean", "max", "min"], help="how heads combine (default mean)")
    p.add_argument("--no-residual", action="store_true", help="use the raw weights, without 0.5·A + 0.5·I per layer")
    crop = p.add_mutually_exclusive_group()
    crop.add_argument("--tokens", type=token_span, metavar="A:B",
                      help="rollout/flow: only tokens A to B (counted from 1, both included; --tokens=-64: is the "
                           "last 64); each row's weights renormalised over the kept tokens")
    crop.add_argument("--last", type=positive_int, metavar="N", help="rollout/flow: only the last N tokens "
                      "(--tokens=-N:)")
    p.add_argument("--picture", help="rollout/flow: also draw the matrix as a PNG here, labelled with the tokens; "
                   "heads: draw the loss against heads removed as a PNG here (needs matplotlib)")
    deprecated_alias(p, "--plot", "--picture")
    add_inference_device(p, what="run the model (heads; rollout and flow read a JSON file)")
    p.set_defaults(func=run_interpret)


def read_weights(path: str):
    """(tokens, weights (layers, h, n, n) float64) from the viewer's JSON; ValueError says what is wrong."""
    import numpy as np

    if not Path(path).is_file():
        raise UsageError(f"no such file: {path}")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path} is not JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("tokens"), list) or "layers" not in data:
        raise UsageError(f'{path} must be an object {{"tokens": [...], "layers": layers × heads × q × k}}')
    tokens = [str(t) for t in data["tokens"]]
    try:
        w = np.asarray(data["layers"], dtype=np.float64)
    except (ValueError, TypeError):
        raise UsageError(f'{path}: "layers" must be a regular layers × heads × q × k array of numbers') from None
    n = len(tokens)
    if w.ndim != 4 or w.shape[-2:] != (n, n):  # nested JSON lists: 4 dimensions have >= 1 layer and head
        raise UsageError(f'{path}: "layers" must be layers × heads × {n} × {n} for {n} tokens; got shape {w.shape}')
    if not np.isfinite(w).all() or (w < 0).any():
        raise UsageError(f'{path}: attention weights must be finite and >= 0')
    return tokens, w


def hf_weights(args: argparse.Namespace):
    """(tokens, weights (layers, h, n, n) float64) of a local Hugging Face model on ``--text``: one
    forward pass with ``attn_implementation="attnlab"`` (an encoder–decoder: its encoder's)."""
    import numpy as np

    check_hf_source(args)
    try:
        # (importing it registers attnlab's attention with transformers)
        from ..integrations.transformers import NAME
        from ..viz.hf import load_and_run
    except ImportError:
        raise UsageError("reading Hugging Face models needs transformers: pip install 'attnlab[hf]'") from None
    rt = inference_runtime(args)
    with rt.autocast():
        view = load_and_run(args.hf, args.text, device=rt.device, attn_implementation=NAME)
    section = view["sections"][0]
    return list(section["tokens"]), np.asarray(section["layers"], dtype=np.float64)


def run_interpret(args: argparse.Namespace) -> int:
    from ..interpret import crop, flow, rollout

    apply_threads(args)
    if args.method == "heads":
        if args.hf:
            raise UsageError("--hf goes with rollout or flow; interpret heads reads --checkpoint DIR")
        return run_heads(args)
    if args.json and args.hf:
        raise UsageError("give --json FILE or --hf MODEL_DIR, not both")
    if not (args.json or args.hf):
        raise UsageError(f"interpret {args.method} needs --json FILE (the viewer's attention JSON) "
                         "or --hf MODEL_DIR --text T")
    if args.picture and not args.picture.endswith(".png"):
        raise UsageError(f"--picture must be a .png file; got {args.picture!r}")
    tokens, w = hf_weights(args) if args.hf else read_weights(args.json)
    span = Span(-args.last, None) if args.last else args.tokens
    first = 0
    if span is not None:
        first, stop = span.indices(len(tokens))
        tokens, w = tokens[first:stop], crop(w, first, stop)
    if args.method == "flow" and len(tokens) > MAX_FLOW_TOKENS:
        raise UsageError(f"flow runs n² max-flow problems and is slow beyond {MAX_FLOW_TOKENS} tokens; "
                         f"this input has {len(tokens)}: use rollout, or crop it (--last {MAX_FLOW_TOKENS} "
                         f"keeps the last {MAX_FLOW_TOKENS}; --tokens A:B any span)")
    fn = rollout if args.method == "rollout" else flow
    m = fn(w, residual=not args.no_residual, head_fusion=args.head_fusion)
    labels = [repr(t)[1:-1].replace(" ", "␣") or "∅" for t in tokens]  # whitespace visible: ␣, \n, \t
    print_result(m, labels, first)
    if args.picture:
        kept = f"tokens {first + 1}–{first + len(tokens)}, " if span is not None else ""
        draw(m, labels, args.picture, f"attention {args.method} ({kept}{w.shape[0]} layers, heads: "
             f"{args.head_fusion}{', no residual' if args.no_residual else ''})")
        print(f"wrote {args.picture}")
    return 0


def print_result(m, labels: list[str], first: int = 0) -> None:
    """The whole matrix up to ``MAX_PRINTED_TOKENS`` tokens; beyond, each row's ``TOP`` largest entries,
    with the tokens' positions counted from 1 in the input (``first``: the crop's offset)."""
    if len(labels) <= MAX_PRINTED_TOKENS:
        width = max(6, *(len(t) for t in labels))
        print(" " * width + " " + " ".join(f"{t[:6]:>6}" for t in labels))
        for t, row in zip(labels, m):
            print(f"{t:>{width}} " + " ".join(f"{v:6.3f}" for v in row))
        return
    print(f"{len(labels)} tokens: each output token's {TOP} largest input tokens (position counted from 1, "
          f"token, value); --tokens A:B crops, --picture draws the whole matrix")
    pos = [f"{first + i + 1}" for i in range(len(labels))]
    width = max(len(p) + len(t) + 1 for p, t in zip(pos, labels))
    for i, row in enumerate(m):
        top = [j for j in sorted(range(len(row)), key=lambda j: -row[j])[:TOP] if row[j] > 0]
        cells = "  ".join(f"{pos[j] + ' ' + labels[j]:>{width}} {row[j]:.3f}" for j in top)
        print(f"{pos[i] + ' ' + labels[i]:>{width}} ← {cells}")


def draw(m, labels: list[str], path: str, title: str) -> None:
    """The matrix as a heatmap labelled with the tokens (``viz.heatmap``: sized to them, under 4,000 px)."""
    from ..viz.heatmap import heatmap

    fig = heatmap(m, labels, labels, title=title, annotate=len(labels) <= 12,
                  xlabel="input token", ylabel="output token (last layer)")
    save_figure(fig, path)  # written whole, then renamed


def gpt_text(args: argparse.Namespace, loaded):
    """(character ids, what they are) to measure a GPT's loss on: --text FILE, or the part of its
    training text (Shakespeare's plays, or the file it was trained on) that its training held out."""
    vocab = loaded.vocabs["vocab"]
    if args.text:
        if not Path(args.text).is_file():
            raise UsageError(f"no such file: {args.text}")
        return vocab.encode_tensor(Path(args.text).read_text(encoding="utf-8")), args.text
    data = loaded.config.get("data") or {}
    if data.get("name") == "shakespeare":
        from ..data import shakespeare

        text, what = shakespeare.load_text(plays=data.get("plays")), "the held-out plays"
    elif data.get("name") == "text" and Path(str(data.get("path"))).is_file():
        text, what = Path(data["path"]).read_text(encoding="utf-8"), f"the held-out part of {data['path']}"
    else:
        raise UsageError("interpret heads on a GPT run needs --text FILE (the text to measure the loss on): "
                         "its checkpoint does not say where its training text is")
    from ..train.heldout import lm_held_out

    return lm_held_out(loaded, text), what


def heads_loss(args: argparse.Namespace, loaded, device="cpu"):
    """(loss(model) -> scalar, what it is measured on) for ``interpret heads``; the data on ``device``."""
    import torch

    if loaded.kind == "gpt":
        ids, source = gpt_text(args, loaded)
        n = min(loaded.model.config.block_size, len(ids) - 1)
        if n < 1:
            raise UsageError(f"{source} needs at least 2 characters; got {len(ids)}")
        starts = range(0, len(ids) - n, n)[: args.limit]  # non-overlapping windows of n + 1 characters
        tokens = torch.stack([ids[i:i + n] for i in starts])  # (windows, n)
        targets = torch.stack([ids[i + 1:i + n + 1] for i in starts])
        tokens, targets = tokens.to(device), targets.to(device)
        return (lambda m: m.loss(tokens, targets)), f"{len(starts)} windows of {n} characters of {source}"
    from ..data.batching import collate
    from ..train.heldout import translation_split
    from ..train.loop import loss_on

    if args.text:
        raise UsageError("--text is for GPT runs; a translator run is measured on its own --split")
    ds, examples = translation_split(loaded, args.split, args.data_path)
    examples = examples[: args.limit]
    if not examples:
        raise UsageError(f"{ds.name} has no {args.split} sentences to measure the loss on")
    batch = collate(examples).to(device)
    return (lambda m: loss_on(m, batch)[0]), f"{len(examples)} {args.split} sentences of {ds.name}"


def run_heads(args: argparse.Namespace) -> int:
    from ..interpret import ablation_curve, attention_modules, head_importance, plot_ablation
    from ..train.load import load_model

    if not args.checkpoint:
        raise UsageError("interpret heads needs --checkpoint DIR (a Transformer translator or GPT checkpoint) "
                         "or --pretrained NAME")
    if args.picture and not args.picture.endswith(".png"):
        raise UsageError(f"--picture must be a .png file; got {args.picture!r}")
    rt = inference_runtime(args)
    loaded = load_model(args.checkpoint, kind=("transformer", "gpt"))
    loaded.model.to(rt.device)
    loss, what = heads_loss(args, loaded, rt.device)
    names = [n for n, _ in attention_modules(loaded.model)]
    with rt.autocast():  # the gates, the importance and the losses stay on the CPU
        importance = head_importance(loaded.model, loss=loss)
        order, losses = ablation_curve(loaded.model, importance=importance, loss=loss)
    print(f"head importance |dL/d gate| (Michel et al. 2019), loss on {what}; heads counted from 1")
    print(f"{'module':<40} " + " ".join(f"{'h' + str(h + 1):>8}" for h in range(importance.shape[1])))
    for name, row in zip(names, importance.tolist()):
        print(f"{name:<40} " + " ".join(f"{v:8.4f}" for v in row))
    print(f"\nloss with heads removed, least important first (all heads: {losses[0]:.4f})")
    print(f"{'removed':>7}  {'head':<44} loss")
    for k, ((m, h), value) in enumerate(zip(order, losses[1:]), 1):
        print(f"{k:>7}  {names[m] + ' h' + str(h + 1):<44} {value:.4f}")
    if args.picture:
        plot_ablation(losses, args.picture, labels=[f"{m + 1}.{h + 1}" for m, h in order],
                      title=f"head ablation, {loaded.kind} ({len(names)} attention modules × "
                            f"{importance.shape[1]} heads), loss on {what}")
        print(f"wrote {args.picture}")
    return 0
