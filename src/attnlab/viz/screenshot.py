"""A PNG of a viewer page, taken in headless Chromium (for READMEs and docs).

``screenshot(page, png, view="head", focus=None)`` opens the page in the system's
chromium (driven by Playwright, never ``playwright install``: the browser is launched
by path) on a view, with query token ``focus`` (counted from 1, as the page shows it)
chosen through the page's address (``#view=…&query=…``), and writes the PNG atomically.
Needs the ``playwright`` package and a chromium on the PATH.
"""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._files import writing
from .viewer import VIEWS

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str | None:
    """The system chromium's path, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def screenshot(page: str | Path, png: str | Path, *, view: str = "head", focus: int | None = None,
               width: int = 900, height: int = 560) -> Path:
    """Open ``page`` on ``view`` (with query token ``focus``, from 1, chosen when given), write ``png``."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}; got {view!r}")
    if focus is not None and (isinstance(focus, bool) or not isinstance(focus, int) or focus < 1):
        raise ValueError(f"focus is a query token counted from 1 (the first token is 1); got {focus!r}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise ImportError("screenshots need the playwright package (pip install playwright) and a chromium") from None
    exe = chromium()
    if exe is None:
        raise ImportError("screenshots need a chromium browser on the PATH (Debian: apt-get install chromium)")
    page, png = Path(page).resolve(), Path(png)
    # In a thread of its own: the sync API refuses to run where an asyncio loop runs (Jupyter, another
    # Playwright session), and a fresh thread has none.
    address = page.as_uri() + f"#view={view}" + ("" if focus is None else f"&query={focus}")
    with writing(png) as tmp, ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(_shoot, sync_playwright, exe, address, tmp, width, height).result()
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


__all__ = ["screenshot", "chromium", "VIEWS"]
