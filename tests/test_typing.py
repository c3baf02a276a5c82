"""The core packages type-check: ``mypy`` is clean on ``attnlab.functional``, ``attnlab.nn``,
``attnlab.kernels``, ``attnlab.masks`` and ``attnlab.patterns``.

The settings are ``[tool.mypy]`` in pyproject.toml: the five are checked with
``check_untyped_defs``, ``disallow_incomplete_defs`` and ``disallow_untyped_defs``; the rest
of attnlab is followed silently (its types are used, its own errors not reported). mypy caches
in ``.mypy_cache`` at the repository root, so a warm run takes a few seconds. Skipped, with a
message, when mypy is not installed (it is in the ``dev`` extra).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 floor
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# what is checked: the same five as [tool.mypy] files, named here so that the test cannot shrink silently
CORE = ["src/attnlab/functional", "src/attnlab/nn", "src/attnlab/kernels", "src/attnlab/masks.py", "src/attnlab/patterns.py"]
CORE_MODULES = {"attnlab.functional.*", "attnlab.nn.*", "attnlab.kernels.*", "attnlab.masks", "attnlab.patterns"}


def _config() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mypy"]


def test_core_packages_are_checked_strictly():
    """The settings really apply to the five (no blanket ignore_errors, no lax override)."""
    cfg = _config()
    assert sorted(cfg["files"]) == sorted(CORE)
    assert not cfg.get("ignore_errors", False)
    strict = [o for o in cfg.get("overrides", []) if CORE_MODULES <= set(o["module"])]
    assert strict, f"no [[tool.mypy.overrides]] section covers all of {sorted(CORE_MODULES)}"
    for key in ("check_untyped_defs", "disallow_incomplete_defs", "disallow_untyped_defs"):
        assert all(o.get(key) is True for o in strict), f"{key} must be true for the core packages"
    for o in cfg.get("overrides", []):
        core = [m for m in o["module"] if m.startswith(tuple(c.rstrip(".*") for c in CORE_MODULES))]
        assert not (core and o.get("ignore_errors")), f"ignore_errors on core modules {core}"


def test_mypy_is_clean_on_the_core_packages():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed: pip install -e '.[dev]' (the dev extra pins it)")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), *CORE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mypy exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
