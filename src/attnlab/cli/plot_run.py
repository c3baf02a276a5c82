"""``attnlab plot-run DIR``: draw a training run's curves from its ``metrics.jsonl``.

    attnlab plot-run runs/de-en                    # writes curves.png in the current folder
    attnlab plot-run runs/de-en -o de-en.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._deprecated import deprecated_alias
from ._errors import UsageError


def save_figure(fig, path):
    """``attnlab.viz.heatmap.save`` (written whole, then renamed), imported only when a figure is written."""
    from ..viz.heatmap import save

    return save(fig, path)

def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("plot-run", help=help,
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a checkpoint folder written by attnlab train ...")
    p.add_argument("-o", "--out", default="curves.png", help="the PNG to write (default curves.png)")
    deprecated_alias(p, "--output", "--out")
    p.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from ..train import runlog

    run = Path(args.run)
    if not run.is_dir():
        raise UsageError(f"no run folder at {run}")
    records = runlog.read(run)
    if not records:
        raise UsageError(f"{run} has no {runlog.NAME} (runs written before attnlab logged metrics have none)")
    if not args.out.endswith(".png"):
        raise UsageError(f"--out must be a .png file; got {args.out!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = sorted({k for r in records for k, v in r.items()
                   if k not in ("step", "wall_s", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool)})
    losses = [k for k in keys if "loss" in k]
    others = [k for k in keys if k not in losses]
    panels = [losses] * bool(losses) + [[k] for k in others]
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.6 * len(panels)), squeeze=False, sharex=True)
    for ax, names in zip(axes[:, 0], panels):
        for k in names:
            pts = [(r["step"], r[k]) for r in records if isinstance(r.get(k), (int, float))]
            ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o" if len(pts) < 30 else None, label=k)
        ax.set_ylabel(names[0] if len(names) == 1 else "loss (nats per token)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(f"{run.name}: {len(records)} records")
    fig.tight_layout()
    out = save_figure(fig, args.out)  # written whole, then renamed
    print(f"wrote {out}")
    return 0
