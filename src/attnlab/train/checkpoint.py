"""Checkpoints: a folder with ``model.safetensors``, ``config.json`` and text files.

    run/
      model.safetensors   tensors (weights; optimizer state may be flattened in too)
      config.json         {"format": 1, "attnlab_version": ..., **config}
      vocab.json ...      any further text files
      .complete           written last: the folder is whole; lists the files the save wrote
      .attnlab-save       the save's record: {"folder": the name under which attnlab owns it}

Saving is safe at every instant, also against a kill (SIGKILL, power loss):

1. the new checkpoint is written to a sibling folder ``.NAME.<random>.attnlab-new``, its
   record written first, every file and the folder fsynced, and ``.complete`` written last;
2. the record in ``NAME`` is set to ``.NAME.<random>.attnlab-old`` and ``NAME`` renamed to
   that name (the parent folder fsynced);
3. the new folder is renamed to ``NAME`` (fsynced), and only then
4. what else the old folder holds (a ``tensorboard/`` log, a file of the user's) moves into
   the new ``NAME``, and the files the old save wrote are removed with its folder.

At every instant a complete checkpoint exists: ``NAME`` itself or, between steps 2 and 3,
the complete new folder and the old one. Reading never writes or deletes anything: with
``NAME`` missing, a reader reads the complete leftover (the new folder, else the old one).
The next save (or ``recover``) puts it back in place and finishes step 4.

attnlab deletes or renames only what it wrote: a leftover folder counts as attnlab's only
when its ``.attnlab-save`` record names that very folder (a copy under another name, or a
folder of the user's such as ``.NAME.old-backup``, is never touched), and of an old
checkpoint only the files its ``.complete`` lists are removed. An empty folder with
attnlab's temporary name, or one holding nothing but an unfinished record (a save killed
between its ``mkdir`` and its record), is removed too.

One writer at a time: a save takes the lock ``.NAME.lock`` (``flock``, an empty file beside
the checkpoint that stays there; the system drops the lock when its process ends, so a
killed run never leaves a stale lock). ``check_out_dir``, which the training commands call
before any work, takes it for the rest of the process, so a second run on the same folder is
refused at once with a ``CheckpointError``. Under torchrun only rank 0 writes and locks.

``save_checkpoint`` and ``check_out_dir`` refuse a path that is a file, or a folder that is
neither empty nor an attnlab checkpoint, with a ``CheckpointError`` naming it. Loading reads
tensors with safetensors (no pickle, no code runs) and raises ``CheckpointError`` (a
``ValueError``) with a clear message for a missing folder, a missing or corrupt file, or a
checkpoint of another format. A save that fails (a full disk, a read-only folder) raises a
``CheckpointError`` naming the folder and the cause, and leaves the last checkpoint as it was.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from .._files import fsync_dir

FORMAT = 1
MARKER = ".complete"
RECORD = ".attnlab-save"
OWN = ("config.json", "model.safetensors", MARKER, RECORD)  # names a caller's ``files`` may not take
# What a run writes into its checkpoint folder besides saves (TensorBoard's event files), maybe before
# the first one: a folder holding only these still takes a checkpoint, and each save carries them along.
KEPT = ("tensorboard",)

# A hook called with the name of each step of a save (tests inject a kill here).
_on_step: Callable[[str], None] | None = None
# Locks this process holds: lock file → its descriptor.
_held: dict[str, int] = {}


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or written; the message says which path and why."""


def _step(name: str) -> None:
    if _on_step is not None:
        _on_step(name)


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


# -- the lock ---------------------------------------------------------------------------------------


def _try_lock(fd: int) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
            return True
        except OSError:
            return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _acquire(target: Path) -> str | None:
    """Lock ``target`` for this process; the lock's key when this call took it, None when held already."""
    key = os.path.join(os.path.realpath(target.parent), f".{target.name}.lock")  # one key per folder, however spelled
    if key in _held:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    if not _try_lock(fd):
        os.close(fd)
        raise CheckpointError(f"{target} is being written by another attnlab run (it holds the lock {key}); "
                              "wait for that run to end, or choose another folder")
    _held[key] = fd
    return key


def _release(key: str | None) -> None:
    if key is not None:
        os.close(_held.pop(key))  # closing the descriptor drops the lock


def _folder(directory: str | Path) -> Path:
    """The folder a save may replace; not the current folder, nor one that holds it."""
    path = Path(directory)
    full, here = os.path.abspath(path), os.path.abspath(os.curdir)
    if here == full or here.startswith(full.rstrip(os.sep) + os.sep):
        raise CheckpointError(f"{path} is the current folder or holds it; a save replaces the checkpoint folder "
                              "whole: give it by a name from outside it")
    return path


def _writes() -> bool:
    """Under torchrun only rank 0 writes checkpoints (and so takes their lock)."""
    return os.environ.get("RANK", "0") in ("", "0")


# -- whose folder is it -----------------------------------------------------------------------------


def _leftovers(target: Path) -> list[Path]:
    """Siblings with the names of a save's folders, ``.NAME.<random>.attnlab-new|old``: new ones first, newest first."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{16}}\.attnlab-(new|old)")
    try:
        found = [p for p in target.parent.iterdir() if pattern.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []
    # a new folder before an old one (both complete only when a kill fell between steps 2 and 3)
    return sorted(found, key=lambda p: (p.name.endswith("new"), p.stat().st_mtime_ns), reverse=True)


def _record(folder: Path) -> dict | None:
    """The save's record in ``folder`` when it names the folder itself (attnlab made it under this name)."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("folder") == folder.name else None


def _complete(folder: Path) -> bool:
    """A leftover that can be read as the checkpoint: a finished new one, or an old one."""
    if _record(folder) is None:
        return False
    return (folder / MARKER).is_file() if folder.name.endswith("new") else is_checkpoint(folder)


def _manifest(folder: Path, before_lists: Iterable[str] = ()) -> set[str]:
    """The files a save wrote into ``folder``; for a checkpoint from before ``.complete`` listed them,
    ``before_lists`` (the files of the save that replaces it) and ``config.json``, ``model.safetensors``."""
    try:
        files = json.loads((folder / MARKER).read_text(encoding="utf-8"))["files"]
        return {str(f) for f in files} | set(OWN)
    except (OSError, ValueError, KeyError, TypeError):  # no list (an empty .complete, or none)
        return set(before_lists) | set(OWN)


def _readable(target: Path) -> Path:
    """Where a reader finds the checkpoint ``target``: itself, else a complete leftover of a save."""
    if target.exists():
        return target
    return next((p for p in _leftovers(target) if _complete(p)), target)


# -- the writer's repairs -----------------------------------------------------------------------------


def _retire(old: Path, target: Path) -> None:
    """Move what the old checkpoint holds besides its save's files into ``target``; remove the rest.

    Its record lists the files its save wrote (written into the folder before it moved aside)."""
    ours = {str(f) for f in (_record(old) or {}).get("files", [])} | set(OWN)
    for p in sorted(old.iterdir()):
        if p.name not in ours and not os.path.lexists(target / p.name):
            os.rename(p, target / p.name)
    for name in sorted(ours - {RECORD}) + [RECORD]:  # the record last: a killed retire is found again
        if (old / name).is_file() and not (old / name).is_symlink():
            os.unlink(old / name)
    _rmdir(old)


def _stillborn(folder: Path) -> bool:
    """A save's folder killed before its record was written: empty, or holding an unfinished record only."""
    entries = os.listdir(folder)
    if entries == [RECORD]:
        try:
            json.loads((folder / RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return True
    return not entries


def _rmdir(folder: Path) -> None:
    try:
        os.rmdir(folder)  # only an empty folder: a file of the user's inside keeps it
    except OSError:
        pass


def _repair(target: Path) -> bool:
    """Finish or undo an interrupted save (under the lock); True when a checkpoint was put back."""
    restored = False
    if not target.exists():
        found = _readable(target)
        if found != target:
            os.rename(found, target)
            fsync_dir(target.parent)
            restored = True
    for p in _leftovers(target):
        if _stillborn(p):
            if (p / RECORD).exists():
                os.unlink(p / RECORD)
            _rmdir(p)
        elif target.is_dir() and _record(p) is not None:
            if p.name.endswith("new"):
                shutil.rmtree(p)
            else:
                _retire(p, target)
    return restored


def recover(directory: str | Path) -> bool:
    """Finish or undo a save that was interrupted; True when a checkpoint was put back in place.

    With ``NAME`` missing, the complete new folder of a save becomes ``NAME``, else its old
    folder. Then the leftovers of saves are cleaned up (see the module's docstring)."""
    target = _folder(directory)
    key = _acquire(target)
    try:
        return _repair(target)
    finally:
        _release(key)


def _refuse_foreign(path: Path) -> None:
    shown = _readable(path)
    if shown.exists() and not shown.is_dir():
        raise CheckpointError(f"{path} is a file, not a folder: choose a new or empty folder for the checkpoint")
    if shown.is_dir() and any(p.name not in KEPT for p in shown.iterdir()) and not is_checkpoint(shown):
        names = ", ".join(sorted(p.name for p in shown.iterdir())[:5])
        raise CheckpointError(
            f"{path} is a folder that is not an attnlab checkpoint (it holds {names}); it is left alone: "
            "choose a new or empty folder"
        )


def check_out_dir(directory: str | Path) -> Path:
    """A folder a command may write a checkpoint into: missing, empty, or an attnlab checkpoint.

    Raises ``CheckpointError`` for a file, or a folder of the user's that holds anything else
    (nothing of it would be kept otherwise), and when another run holds the folder's lock.
    Then takes that lock for the rest of this process, and finishes an interrupted save."""
    path = _folder(directory)
    _refuse_foreign(path)
    if _writes():
        _acquire(path)
        _repair(path)
    return path


# -- saving -------------------------------------------------------------------------------------------


def _write_record(folder: Path, name: str, files: set[str] | None = None) -> None:
    """``folder/.attnlab-save``: the folder is attnlab's under ``name``; ``files``: those its save wrote."""
    record = {"folder": name, **({"files": sorted(files)} if files is not None else {})}
    fd = os.open(folder / RECORD, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o666)
    try:
        os.write(fd, json.dumps(record).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_new(new: Path, tensors: dict[str, torch.Tensor], config: dict[str, Any], files: dict[str, str]) -> None:
    """The new checkpoint, whole, in the fresh folder ``new`` (record first, ``.complete`` last)."""
    from safetensors.torch import save

    from .. import __version__
    from .._files import write_bytes, write_text

    _write_record(new, new.name)
    # Serialised here and written by write_bytes, which checks every write (a full disk is an error).
    write_bytes(new / "model.safetensors", save({k: v.detach().contiguous().cpu() for k, v in tensors.items()}))
    meta = {"format": FORMAT, "attnlab_version": __version__, **config}
    write_text(new / "config.json", json.dumps(meta, indent=2, ensure_ascii=False))
    for name, text in files.items():
        write_text(new / name, text)
    _step("written")
    write_text(new / MARKER, json.dumps({"files": sorted(["config.json", "model.safetensors", *files])}))
    fsync_dir(new)
    _step("complete")


def _swap(target: Path, new: Path) -> None:
    """Steps 2 to 4: the old checkpoint aside (marked as attnlab's), the new one in, the old one retired."""
    old = None
    if target.exists():
        old = new.with_name(new.name[: -len("new")] + "old")
        _write_record(target, old.name, _manifest(target, _manifest(new)))
        os.rename(target, old)
        fsync_dir(target.parent)
        _step("old moved")
    os.rename(new, target)
    fsync_dir(target.parent)
    _step("new moved")
    if old is not None:
        _retire(old, target)
        _step("old removed")


def _check_files(files: dict[str, str]) -> None:
    for name in files:
        if Path(name).name != name or name in OWN or name in ("", ".", ".."):
            raise ValueError(f"a checkpoint's extra file needs a plain file name other than {', '.join(OWN)}; got {name!r}")


def save_checkpoint(
    directory: str | Path,
    tensors: dict[str, torch.Tensor],
    config: dict[str, Any],
    files: dict[str, str] | None = None,
) -> Path:
    """Write a checkpoint folder so that a complete one exists at every instant; return its path."""
    from safetensors import SafetensorError

    target, files = _folder(directory), dict(files or {})
    _check_files(files)
    _refuse_foreign(target)
    key = None
    try:
        key = _acquire(target)
        _repair(target)
        _refuse_foreign(target)
        new = target.parent / f".{target.name}.{secrets.token_hex(8)}.attnlab-new"
        os.mkdir(new)
        try:
            _write_new(new, tensors, config, files)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        _swap(target, new)
    except (OSError, SafetensorError) as e:
        cause = getattr(e, "strerror", None) or " ".join(str(e).split())
        raise CheckpointError(f"could not save the checkpoint {target}: {cause}; "
                              "the last checkpoint there (if any) is unchanged") from e
    finally:
        _release(key)
    return target


# -- loading ------------------------------------------------------------------------------------------


def _load(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

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
    return tensors, config


def load_checkpoint(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], Path]:
    """Read ``(tensors, config, path)``; raises ``CheckpointError`` when it cannot. Writes nothing.

    ``path`` is the folder read: ``directory``, or a save's complete leftover while a save
    (or a kill during one) has ``directory`` moved aside."""
    target = Path(directory)
    for attempt in range(3):
        path = _readable(target)
        try:
            tensors, config = _load(path)
            return tensors, config, path
        except (CheckpointError, FileNotFoundError):
            if attempt == 2 or (path.exists() and _readable(target) == path):
                raise  # not a folder moved away by a save running now: the checkpoint itself is wrong
    raise AssertionError("unreachable")  # pragma: no cover


def read_text(path: Path, name: str) -> str:
    """A text file of a checkpoint, with a clear error when it is missing."""
    f = _readable(Path(path)) / name
    if not f.is_file():
        raise CheckpointError(f"checkpoint {path} is missing {name}")
    return f.read_text(encoding="utf-8")


__all__ = ["save_checkpoint", "load_checkpoint", "read_text", "check_out_dir", "recover", "is_checkpoint",
           "CheckpointError", "FORMAT"]
