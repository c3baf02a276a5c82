"""``attnlab.viz.screenshot`` with a stand-in for Playwright (no browser runs): the arguments it refuses and
their words, the chromium it looks for, the page address it opens, and what it asks of the browser."""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from attnlab.viz import screenshot as shot


def _err(call) -> str:
    with pytest.raises(ValueError) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"view": "grid"}, "view must be one of head, model, neuron, matrix; got 'grid'"),
        ({"focus": 0}, "focus is a query token counted from 1 (the first token is 1); got 0"),
        ({"focus": True}, "focus is a query token counted from 1 (the first token is 1); got True"),
        ({"focus": 1.0}, "focus is a query token counted from 1 (the first token is 1); got 1.0"),
    ],
)
def test_a_bad_view_or_focus_is_refused_before_anything_runs(tmp_path, kwargs, says):
    assert _err(lambda: shot.screenshot(tmp_path / "p.html", tmp_path / "p.png", **kwargs)) == says


def test_chromium_is_looked_for_under_its_three_names_in_order(monkeypatch):
    asked = []

    def which(name):
        asked.append(name)
        return "/opt/chrome" if name == "google-chrome" else None

    monkeypatch.setattr(shot.shutil, "which", which)
    assert shot.chromium() == "/opt/chrome" and asked == [
        "chromium",
        "chromium-browser",
        "google-chrome",
    ]
    monkeypatch.setattr(shot.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert shot.chromium() == "/usr/bin/chromium"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


# A 1 × 1 grey PNG, written by hand from the PNG specification (what a browser's screenshot is, in small).
TINY_PNG = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"\x00\x80")) + _chunk(b"IEND", b""))


@pytest.fixture
def fake_playwright(monkeypatch):
    """A sync_playwright that records the calls the screenshot makes and writes a file where asked."""
    calls: dict = {"timeout": False}

    class Tab:
        def goto(self, address):
            calls["goto"] = address

        def wait_for_selector(self, selector, timeout):
            calls["wait"] = (selector, timeout)
            if calls["timeout"]:
                raise TimeoutError("never ready")

        def screenshot(self, path):
            calls["shot"] = path
            Path(path).write_bytes(TINY_PNG)

    class Ctx:
        def new_page(self):
            return Tab()

        def close(self):
            calls["closed"] = True

    class P:
        chromium = SimpleNamespace()

        def __enter__(self):
            def launch(profile, **kw):
                calls["profile"], calls["launch"] = profile, kw
                assert Path(profile).is_dir()
                return Ctx()

            self.chromium = SimpleNamespace(launch_persistent_context=launch)
            return self

        def __exit__(self, *exc):
            return False

    module = ModuleType("playwright.sync_api")
    module.sync_playwright = P
    monkeypatch.setitem(sys.modules, "playwright.sync_api", module)
    monkeypatch.setattr(shot, "chromium", lambda: "/usr/bin/chromium")
    return calls


def test_the_page_opens_on_its_view_and_focus_in_a_headless_browser(tmp_path, fake_playwright):
    page = tmp_path / "p.html"
    page.write_text("<html></html>")
    out = shot.screenshot(page, tmp_path / "p.png", view="matrix", focus=3)
    assert out == tmp_path / "p.png" and out.read_bytes() == shot.marked(TINY_PNG)
    calls = fake_playwright
    assert calls["goto"] == page.resolve().as_uri() + "#view=matrix&query=3"
    assert calls["wait"] == ("body[data-ready='1']", 30000)
    launch = calls["launch"]
    assert launch["executable_path"] == "/usr/bin/chromium" and launch["headless"] is True
    assert launch["viewport"] == {"width": 900, "height": 560}
    assert launch["args"] == [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    assert (
        calls["closed"] and not Path(calls["profile"]).exists()
    )  # the browser closed, its profile removed
    assert Path(calls["profile"]).name.startswith("attnlab-chromium-")
    shot.screenshot(page, tmp_path / "q.png", width=300, height=200)
    assert calls["goto"] == page.resolve().as_uri() + "#view=head"  # the default view, no focus
    assert calls["launch"]["viewport"] == {"width": 300, "height": 200}


def test_a_page_that_never_finishes_drawing_is_an_error_that_names_it(tmp_path, fake_playwright):
    fake_playwright["timeout"] = True
    page = tmp_path / "p.html"
    page.write_text("<html></html>")
    with pytest.raises(RuntimeError) as e:
        shot.screenshot(page, tmp_path / "p.png", view="model")
    address = page.resolve().as_uri() + "#view=model"
    assert str(e.value) == f"the page did not finish drawing in 30 s: {address}"
    assert fake_playwright["closed"] and not (tmp_path / "p.png").exists()


def test_the_png_written_carries_attnlabs_mark_which_other_readers_see(tmp_path, fake_playwright):
    Image = pytest.importorskip("PIL.Image")
    page = tmp_path / "p.html"
    page.write_text("<html></html>")
    out = shot.screenshot(page, tmp_path / "p.png")
    with Image.open(out) as im:  # Pillow reads the text chunk and the pixel, as any PNG reader would
        assert im.info["Software"] == "attnlab view --screenshot" and im.size == (1, 1) and im.getpixel((0, 0)) == 128
    assert shot.ours(out) and not shot.ours(page) and not shot.ours(tmp_path / "none.png")
    shot.screenshot(page, out, view="matrix")  # attnlab's own screenshot: written again
    assert fake_playwright["goto"].endswith("#view=matrix") and shot.ours(out)


@pytest.mark.parametrize("theirs", [TINY_PNG, b"my notes", shot.marked(TINY_PNG)[:40]])
def test_a_file_attnlab_did_not_write_is_refused_before_the_browser_starts(tmp_path, fake_playwright, theirs):
    page, png = tmp_path / "p.html", tmp_path / "head-view.png"
    page.write_text("<html></html>")
    png.write_bytes(theirs)  # a PNG without the mark, another file, a mark cut short
    with pytest.raises(FileExistsError) as e:
        shot.screenshot(page, png)
    assert str(e.value) == (f"{png} is not a screenshot attnlab wrote (it has no attnlab mark), so it is left alone: "
                            "move it away, or choose another --screenshot")
    assert png.read_bytes() == theirs and "launch" not in fake_playwright
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head-view.png", "p.html"]


def test_a_browser_that_writes_no_png_is_an_error(tmp_path):
    with pytest.raises(RuntimeError) as e:
        shot.marked(b"GIF89a")
    assert str(e.value) == "the browser's screenshot is not a PNG"
