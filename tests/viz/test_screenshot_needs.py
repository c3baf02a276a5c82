"""``attnlab.viz.screenshot``: without Playwright or a chromium, an ImportError says what to install (no browser runs)."""

from __future__ import annotations

import sys

import pytest

from attnlab.viz import screenshot as shot


def test_without_playwright_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "playwright.sync_api", None)  # the import fails as if not installed
    with pytest.raises(ImportError) as e:
        shot.screenshot(tmp_path / "p.html", tmp_path / "p.png")
    assert str(e.value) == "screenshots need the playwright package (pip install 'attnlab[viz]') and a chromium"
    assert not (tmp_path / "p.png").exists()


def test_without_a_chromium_the_error_says_how_to_install_one(tmp_path, monkeypatch):
    pytest.importorskip("playwright.sync_api", reason="needs the playwright package (pip install playwright)")
    monkeypatch.setattr(shot.shutil, "which", lambda name: None)
    assert shot.chromium() is None
    with pytest.raises(ImportError) as e:
        shot.screenshot(tmp_path / "p.html", tmp_path / "p.png")
    assert str(e.value) == "screenshots need a chromium browser on the PATH (Debian: apt-get install chromium)"
    assert not (tmp_path / "p.png").exists()
