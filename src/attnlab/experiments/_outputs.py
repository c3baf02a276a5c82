"""How an experiment writes what it found: ``results.json`` and ``table.md`` (``write_results``) and its
figure (``save_figure``: laid out, at 100 dpi, closed), each file written whole (``_files``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._files import write_text, writing


def save_figure(plt: Any, fig: Any, path: str | Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` (``_files.writing``: the file appears whole or not at all)
    and close it with ``plt`` (``matplotlib.pyplot``); returns the path."""
    fig.tight_layout()
    with writing(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return Path(path)


def write_results(out_dir: str | Path, results: dict, table: str, *, indent: int = 2, ensure_ascii: bool = True) -> Path:
    """Make ``out_dir`` and write ``results.json`` (``results``) and ``table.md`` (``table``) in it; returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "results.json", json.dumps(results, indent=indent, ensure_ascii=ensure_ascii))
    write_text(out / "table.md", table)
    return out


__all__ = ["save_figure", "write_results"]
