"""The offline viewer in a real headless browser: it renders, hover shows a query's weights, no console errors.

Uses Debian's chromium driven by Playwright for Python (never `playwright
install`: the system browser is launched by path). The set-up installs
chromium with apt-get where it can (as root); the test skips with a message
only where no browser can be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from attnlab.explain import load, run
from attnlab.viz.viewer import from_example, write_html

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
        if path:
            return path
    if os.geteuid() == 0 and shutil.which("apt-get"):  # the set-up: install Debian's chromium
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        try:
            subprocess.run("apt-get update -qq && apt-get install -y -qq chromium", shell=True, env=env,
                           timeout=600, check=True, capture_output=True)
        except (subprocess.SubprocessError, OSError):
            return None
        return shutil.which("chromium")
    return None


@pytest.fixture(scope="module")
def browser_page():
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium browser, and it could not be installed (apt-get install chromium as root)")
    profile = tempfile.mkdtemp(prefix="attnlab-chromium-")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, headless=True, args=ARGS)
        try:
            yield ctx.new_page()
        finally:
            ctx.close()
            shutil.rmtree(profile, ignore_errors=True)


def _open(page, path):
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append("network: " + r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=5000)
    return errors


def test_viewer_renders_and_hover_shows_weights(browser_page, tmp_path):
    ex = load("seed-001-multi-head")
    t = run(ex)
    w = t["weights"].value[0]  # (h, q, k)
    page = browser_page
    errors = _open(page, write_html(from_example(ex, t), tmp_path / "mh.html"))
    assert page.locator(".qtok").count() == 5 and page.locator(".ktok").count() == 5
    assert page.locator("#grid td").count() == 25
    assert page.inner_text(".qtok[data-i='3']") == "垫子"

    page.hover(".qtok[data-i='1']")  # 坐, head 1
    shown = [float(x) for x in page.eval_on_selector_all(".ktok", "els => els.map(e => e.dataset.w)")]
    assert shown == pytest.approx(w[0, 1].tolist(), abs=1e-12)
    assert "坐" in page.inner_text("#readout") and "上" in page.inner_text("#readout")

    page.select_option("#head", label="2")  # head 2
    page.hover(".qtok[data-i='0']")
    shown = [float(x) for x in page.eval_on_selector_all(".ktok", "els => els.map(e => e.dataset.w)")]
    assert shown == pytest.approx(w[1, 0].tolist(), abs=1e-12)
    assert "head 2" in page.inner_text("#readout")

    page.click(".qtok[data-i='2']")  # click keeps the selection while hovering elsewhere
    page.hover(".qtok[data-i='4']")
    assert "query 3" in page.inner_text("#readout")
    assert errors == []


def test_viewer_toggles_masked_positions(browser_page, tmp_path):
    ex = load("attnlab-masked-causal")
    page = browser_page
    errors = _open(page, write_html(from_example(ex, run(ex)), tmp_path / "m.html"))
    page.hover(".qtok[data-i='1']")
    masked = page.eval_on_selector_all(".ktok", "els => els.map(e => e.classList.contains('masked'))")
    assert masked == [False, False, True, True]
    assert page.locator("#grid td.masked").count() == 6
    page.uncheck("#show-masked")
    assert page.locator("#grid td.masked").count() == 0
    assert errors == []
