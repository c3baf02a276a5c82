"""Checkpoints: a folder with ``model.safetensors``, ``config.json`` and text files.

    run/
      model.safetensors   tensors (weights; optimizer state may be flattened in too)
      config.json         {"format": 1, "attnlab_version": ..., **config}
      vocab.json ...      any further text files

Writing goes to a temporary sibling folder that is renamed into place, so a
run killed mid-save leaves either the old checkpoint or the new one, never
half of one. Loading reads tensors with safetensors (no pickle, no code runs)
and raises ``CheckpointError`` (a ``ValueError``) with a clear message for a
missing folder, a missing or corrupt file, or a checkpoint of another format.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; the message says which file and why."""


def save_checkpoint(
    directory: str | Path,
    tensors: dict[str, torch.Tensor],
    config: dict[str, Any],
    files: dict[str, str] | None = None,
) -> Path:
    """Write a checkpoint folder atomically and return its path."""
    from safetensors.torch import save_file

    from .. import __version__

    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp / "model.safetensors"))
        meta = {"format": FORMAT, "attnlab_version": __version__, **config}
        (tmp / "config.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False), encoding="utf-8")
        for name, text in (files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
        tmp.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_checkpoint(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path]:
    """Read ``(tensors, config, path)``; raises ``CheckpointError`` when it cannot."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint folder at {path}")
    cfg_file, weights = path / "config.json", path / "model.safetensors"
    for f in (cfg_file, weights):
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is missing {f.name}")
    try:
        config = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{cfg_file} is not valid JSON: {e}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        got = config.get("format") if isinstance(config, dict) else None
        raise CheckpointError(
            f"{cfg_file} has checkpoint format {got!r} (written by attnlab "
            f"{config.get('attnlab_version', '?') if isinstance(config, dict) else '?'}); "
            f"this attnlab reads format {FORMAT}"
        )
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights} is not a readable safetensors file: {e}") from None
    return tensors, config, path


def read_text(path: Path, name: str) -> str:
    """A text file of a checkpoint, with a clear error when it is missing."""
    f = Path(path) / name
    if not f.is_file():
        raise CheckpointError(f"checkpoint {path} is missing {name}")
    return f.read_text(encoding="utf-8")


__all__ = ["save_checkpoint", "load_checkpoint", "read_text", "CheckpointError", "FORMAT"]
