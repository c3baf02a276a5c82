"""How an experiment writes its figure: laid out, written whole at 100 dpi, closed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._files import writing


def save_figure(plt: Any, fig: Any, path: str | Path) -> Path:
    """Lay ``fig`` out, write it to ``path`` (``_files.writing``: the file appears whole or not at all)
    and close it with ``plt`` (``matplotlib.pyplot``); returns the path."""
    fig.tight_layout()
    with writing(path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return Path(path)


__all__ = ["save_figure"]
