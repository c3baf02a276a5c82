"""Checkpoints: a folder with ``model.safetensors``, ``config.json`` and text files.

    run/
      model.safetensors   tensors (weights; optimizer state may be flattened in too)
      config.json         {"format": 1, "attnlab_version": ..., **config}
      vocab.json ...      any further text files
      .complete           written last: the folder is whole

Saving is safe at every instant, also against a kill (SIGKILL, power loss):

1. the new checkpoint is written to a sibling ``.NAME.tmp-*`` folder, every file and the
   folder fsynced, and ``.complete`` written last;
2. the old checkpoint is renamed to ``.NAME.old-*`` (the parent folder fsynced);
3. the new folder is renamed to ``NAME`` (fsynced), and only then
4. the old one is deleted.

At every instant a complete checkpoint exists: ``NAME`` itself, or (between steps 2 and 3)
the complete ``.tmp-*`` and the ``.old-*``. ``recover(NAME)``, which every load and save
runs first, puts the newest complete one back in place and removes incomplete leftovers.

Nothing that is not ours is ever overwritten or deleted: ``save_checkpoint`` and
``check_out_dir`` refuse a path that is a file, or a folder that is neither empty nor an
attnlab checkpoint, with a ``CheckpointError`` naming it. Loading reads tensors with
safetensors (no pickle, no code runs) and raises ``CheckpointError`` (a ``ValueError``)
with a clear message for a missing folder, a missing or corrupt file, or a checkpoint of
another format.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

FORMAT = 1
MARKER = ".complete"
# Folders a run writes into its checkpoint folder between saves (TensorBoard's event files):
# a save carries them from the old folder into the new one instead of dropping them.
KEPT = ("tensorboard",)

# A hook called with the name of each step of a save (tests inject a kill here).
_on_step: Callable[[str], None] | None = None


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message says which path and why."""


def _step(name: str) -> None:
    if _on_step is not None:
        _on_step(name)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_checkpoint(path: str | Path) -> bool:
    """True for a folder written by ``save_checkpoint`` (its config.json names a format)."""
    path = Path(path)
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.is_file() and (path / "model.safetensors").is_file()):
        return False
    try:
        return "format" in json.loads(cfg.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError):
        return False


def _leftovers(target: Path, kind: str) -> list[Path]:
    """The ``.NAME.tmp-*`` or ``.NAME.old-*`` siblings of ``target``, newest first."""
    if not target.parent.is_dir():
        return []
    found = [p for p in target.parent.glob(f".{target.name}.{kind}-*") if p.is_dir()]
    return sorted(found, key=lambda p: p.stat().st_mtime_ns, reverse=True)


def recover(directory: str | Path) -> bool:
    """Finish or undo a save that was interrupted; True when a checkpoint was put back in place.

    With ``NAME`` missing, the newest complete ``.tmp-*`` (the new checkpoint, written whole)
    becomes ``NAME``, else the newest ``.old-*``. Incomplete ``.tmp-*`` folders and, once
    ``NAME`` is in place, stale ``.old-*`` folders are removed."""
    target = Path(directory)
    restored = False
    if not target.exists():
        complete = [p for p in _leftovers(target, "tmp") if (p / MARKER).is_file()]
        olds = [p for p in _leftovers(target, "old") if is_checkpoint(p)]
        for candidate in (complete + olds)[:1]:
            candidate.rename(target)
            _fsync_dir(target.parent)
            restored = True
    if target.exists():
        for p in _leftovers(target, "tmp") + _leftovers(target, "old"):
            _carry_kept(p, target)
            shutil.rmtree(p, ignore_errors=True)
    return restored


def _carry_kept(old: Path, new: Path) -> None:
    """Move the ``KEPT`` folders of ``old`` into ``new`` (where ``new`` has none of its own)."""
    for name in KEPT:
        if (old / name).is_dir() and not (new / name).exists():
            (old / name).rename(new / name)


def check_out_dir(directory: str | Path) -> Path:
    """A folder a command may write a checkpoint into: missing, empty, or an attnlab checkpoint.

    Raises ``CheckpointError`` for a file, or a folder of the user's that holds anything else
    (nothing of it would be kept otherwise)."""
    path = Path(directory)
    recover(path)
    if path.exists() and not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a folder: choose a new or empty folder for the checkpoint")
    if path.is_dir() and any(p.name not in KEPT for p in path.iterdir()) and not is_checkpoint(path):
        shown = ", ".join(sorted(p.name for p in path.iterdir())[:5])
        raise CheckpointError(
            f"{path} is a folder that is not an attnlab checkpoint (it holds {shown}); it is left alone: "
            "choose a new or empty folder"
        )
    return path


def save_checkpoint(
    directory: str | Path,
    tensors: dict[str, torch.Tensor],
    config: dict[str, Any],
    files: dict[str, str] | None = None,
) -> Path:
    """Write a checkpoint folder so that a complete one exists at every instant; return its path."""
    from safetensors.torch import save_file

    from .. import __version__

    target = check_out_dir(directory)
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
        _step("written")
        with open(tmp / MARKER, "w") as fh:
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        _step("complete")
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        target.rename(old)
        _fsync_dir(target.parent)
        _step("old moved")
    tmp.rename(target)
    _fsync_dir(target.parent)
    _step("new moved")
    if old is not None:
        _carry_kept(old, target)
        shutil.rmtree(old, ignore_errors=True)
        _step("old removed")
    return target


def load_checkpoint(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path]:
    """Read ``(tensors, config, path)``; raises ``CheckpointError`` when it cannot."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(directory)
    recover(path)
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


__all__ = ["save_checkpoint", "load_checkpoint", "read_text", "check_out_dir", "recover", "is_checkpoint", "CheckpointError", "FORMAT"]
