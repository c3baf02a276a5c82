"""``attnlab interpret rollout|flow``: attention rollout or attention flow of a stack of layers.

    attnlab interpret rollout --json attention.json                  # prints the (n, n) matrix
    attnlab interpret flow --json attention.json --picture flow.png  # and draws it
    attnlab interpret rollout --json attention.json --head-fusion max --no-residual

The JSON is the viewer's: {"tokens": [...], "layers": layers × heads × q × k} (what
``attnlab.models.gpt.attention_json`` writes). Row i of the result: how much output token i
draws from each input token, through every layer (Abnar & Zuidema 2020).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import UsageError
from ._threads import add_threads

MAX_FLOW_TOKENS = 64


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("interpret", help="attention rollout or attention flow over all layers (Abnar & Zuidema 2020)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method", choices=["rollout", "flow"], help="rollout (products of layers) or flow (max-flow)")
    p.add_argument("--json", required=True, help='the viewer\'s JSON: {"tokens": [...], "layers": layers × heads × q × k}')
    p.add_argument("--head-fusion", default="mean", choices=["mean", "max", "min"], help="how heads combine (default mean)")
    p.add_argument("--no-residual", action="store_true", help="use the raw weights, without 0.5·A + 0.5·I per layer")
    p.add_argument("--picture", help="also draw the matrix as a PNG here (needs matplotlib)")
    add_threads(p)
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
    if w.ndim != 4 or w.shape[-2:] != (n, n) or w.shape[0] < 1 or w.shape[1] < 1:
        raise UsageError(f'{path}: "layers" must be layers × heads × {n} × {n} for {n} tokens; got shape {w.shape}')
    if not np.isfinite(w).all() or (w < 0).any():
        raise UsageError(f'{path}: attention weights must be finite and >= 0')
    return tokens, w


def run_interpret(args: argparse.Namespace) -> int:
    from ..interpret import flow, rollout

    if args.picture and not args.picture.endswith(".png"):
        raise UsageError(f"--picture must be a .png file; got {args.picture!r}")
    tokens, w = read_weights(args.json)
    if args.method == "flow" and len(tokens) > MAX_FLOW_TOKENS:
        raise UsageError(f"flow runs n² max-flow problems and is slow beyond {MAX_FLOW_TOKENS} tokens; "
                         f"this input has {len(tokens)}: use rollout, or crop the input")
    fn = rollout if args.method == "rollout" else flow
    m = fn(w, residual=not args.no_residual, head_fusion=args.head_fusion)
    labels = [repr(t)[1:-1].replace(" ", "␣") or "∅" for t in tokens]  # whitespace visible: ␣, \n, \t
    width = max(6, *(len(t) for t in labels))
    print(" " * width + " " + " ".join(f"{t[:6]:>6}" for t in labels))
    for t, row in zip(labels, m):
        print(f"{t:>{width}} " + " ".join(f"{v:6.3f}" for v in row))
    if args.picture:
        draw(m, labels, args.picture, f"attention {args.method} ({w.shape[0]} layers, heads: {args.head_fusion}"
             f"{', no residual' if args.no_residual else ''})")
        print(f"wrote {args.picture}")
    return 0


def draw(m, labels: list[str], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(labels)
    side = min(38.0, 3.0 + 0.3 * n)  # ≤ 4,000 px a side at dpi 100
    fig, ax = plt.subplots(figsize=(side + 1.5, side))
    im = ax.imshow(m, cmap="viridis", vmin=0)
    if n <= 80:
        ax.set_xticks(range(n), labels, rotation=90, fontsize=8)
        ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_xlabel("input token")
    ax.set_ylabel("output token (last layer)")
    ax.set_title(title, fontsize=9, wrap=True)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(out)
