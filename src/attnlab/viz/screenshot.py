"""A PNG of a viewer page, taken in headless Chromium (for READMEs and docs).

``screenshot(page, png, view="head", focus=None)`` opens the page in the system's
chromium (driven by Playwright, never ``playwright install``: the browser is launched
by path) on a view, with query token ``focus`` (counted from 1, as the page shows it)
chosen through the page's address (``#view=…&query=…``), and writes the PNG atomically.
Needs the ``playwright`` package (in the ``viz`` extra) and a chromium on the PATH.

attnlab overwrites only a screenshot it wrote itself: each PNG it writes carries the text chunk
``Software: attnlab view --screenshot`` (``MARK``, before the image data); a file at the path that
lacks it (your picture, or any other file) is refused before the browser starts.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._files import write_bytes
from .viewer import VIEWS

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


SIGNATURE = b"\x89PNG\r\n\x1a\n"
MARK = b"Software\0attnlab view --screenshot"  # a PNG tEXt chunk's keyword, NUL, text


def _chunks(data: bytes):
    """(type, body) of each chunk of a PNG's bytes, in order, up to the first that is cut short."""
    at = len(SIGNATURE)
    while at + 8 <= len(data):
        n, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        if at + 12 + n > len(data):
            return
        yield kind, data[at + 8:at + 8 + n]
        at += 12 + n


def ours(png: str | Path) -> bool:
    """Whether ``png`` is a screenshot attnlab wrote: a PNG with the ``MARK`` text chunk before its image data."""
    try:
        with open(png, "rb") as f:
            data = f.read(1 << 16)  # the mark sits right after the 25-byte header chunk
    except OSError:
        return False
    if not data.startswith(SIGNATURE):
        return False
    for kind, body in _chunks(data):
        if kind == b"tEXt" and body == MARK:
            return True
        if kind in (b"IDAT", b"IEND"):
            return False
    return False


def marked(png: bytes) -> bytes:
    """``png`` with the ``MARK`` text chunk right after its header chunk (IHDR)."""
    if not png.startswith(SIGNATURE) or png[12:16] != b"IHDR":
        raise RuntimeError("the browser's screenshot is not a PNG")
    end = len(SIGNATURE) + 12 + int.from_bytes(png[8:12], "big")
    body = b"tEXt" + MARK
    return png[:end] + len(MARK).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big") + png[end:]


def refuse_theirs(png: str | Path, flag: str = "--screenshot") -> None:
    """A ``FileExistsError`` (one line) when a file is at ``png`` and attnlab did not write it as a screenshot."""
    if os.path.lexists(png) and not os.path.isdir(png) and not ours(png):
        raise FileExistsError(f"{png} is not a screenshot attnlab wrote (it has no attnlab mark), so it is left "
                              f"alone: move it away, or choose another {flag}")


def chromium() -> str | None:
    """The system chromium's path, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(page: str | Path, png: str | Path, *, view: str = "head", focus: int | None = None,
               width: int = 900, height: int = 560) -> Path:
    """Open ``page`` on ``view`` (with query token ``focus``, from 1, chosen when given), write ``png`` (marked as
    attnlab's; a file there that attnlab did not write is refused: ``refuse_theirs``)."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")
    if focus is not None and (isinstance(focus, bool) or not isinstance(focus, int) or focus < 1):
        raise ValueError(f"focus is a query token counted from 1 (the first token is 1); got {focus!r}")
    refuse_theirs(png)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ImportError("screenshots need the playwright package (pip install 'attnlab[viz]') and a chromium") from None
    exe = chromium()
    if exe is None:
        raise ImportError("screenshots need a chromium browser on the PATH (Debian: apt-get install chromium)")
    page, png = Path(page).resolve(), Path(png)
    # In a thread of its own: the sync API refuses to run where an asyncio loop runs (Jupyter, another
    # Playwright session), and a fresh thread has none.
    address = page.as_uri() + f"#view={view}" + ("" if focus is None else f"&query={focus}")
    with tempfile.TemporaryDirectory(prefix="attnlab-shot-") as folder, ThreadPoolExecutor(max_workers=1) as pool:
        shot = Path(folder) / "shot.png"  # the browser's picture; the file the user named gets it marked, whole
        pool.submit(_shoot, sync_playwright, exe, address, shot, width, height).result()
        write_bytes(png, marked(shot.read_bytes()))
    return png


def _shoot(sync_playwright, exe: str, address: str, tmp: Path, width: int, height: int) -> None:
    profile = tempfile.mkdtemp(prefix="attnlab-chromium-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=ARGS,
                                                       viewport={"width": width, "height": height})
            try:
                tab = ctx.new_page()
                tab.goto(address)
                try:
                    tab.wait_for_selector("body[data-ready='1']", timeout=30000)
                except Exception as e:  # Playwright's TimeoutError: the page never finished drawing
                    raise RuntimeError(f"the page did not finish drawing in 30 s: {address}") from e
                tab.screenshot(path=str(tmp))
            finally:
                ctx.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


__all__ = ["screenshot", "chromium", "ours", "marked", "refuse_theirs", "MARK", "VIEWS"]
