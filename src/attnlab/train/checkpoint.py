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
refused at once with a ``CheckpointError``. Under torchrun only rank 0 writes and locks. A save
that fails (or a run that ``check_out_dir`` refuses) gives the lock up and removes its file when
this process created it.

Runs own their folders by intent: ``check_out_dir(out, run="lm", resume=..., overwrite=...)``
refuses a folder that already holds a checkpoint unless the run continues it (``--resume``, a run
of the same kind) or replaces it (``--overwrite``), saying what is there (``describe``: kind, step,
date). Nothing inside the installed package (its shipped models) is ever a place to write.
Reading checks a run's ``kind`` and the counters of its ``state`` (``check_state``).

``save_checkpoint`` and ``check_out_dir`` refuse a path that is a file, or a folder that is
neither empty nor an attnlab checkpoint, with a ``CheckpointError`` naming it. Loading reads
tensors with safetensors (no pickle, no code runs) and raises ``CheckpointError`` (a
``ValueError``) with a clear message for a missing folder, a missing or corrupt file, or a
checkpoint of another format. A save that fails (a full disk, a read-only folder) raises a
``CheckpointError`` naming the folder and the cause, and leaves the last checkpoint as it was.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from .._files import fsync_dir, refuse_package

FORMAT = 1
MARKER = ".complete"
RECORD = ".attnlab-save"
OWN = ("config.json", "model.safetensors", MARKER, RECORD)  # names a caller's ``files`` may not take
# What a run writes into its checkpoint folder besides saves (TensorBoard's event files), maybe before
# the first one: a folder holding only these still takes a checkpoint, and each save carries them along.
KEPT = ("tensorboard",)

# A hook called with the name of each step of a save (tests inject a kill here).
_on_step: Callable[[str], None] | None = None
# Locks this process holds: lock file → its descriptor; and those whose file this process created.
_held: dict[str, int] = {}
_created: set[str] = set()


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


def _lock_key(target: Path) -> str:
    return os.path.join(os.path.realpath(target.parent), f".{target.name}.lock")  # one key per folder, however spelled


def _open_lock(key: str) -> tuple[int, bool]:
    """The lock file's descriptor, and whether this call created the file."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(key, flags | os.O_CREAT | os.O_EXCL, 0o666), True
    except FileExistsError:
        return os.open(key, flags), False


def _acquire(target: Path) -> str | None:
    """Lock ``target`` for this process; the lock's key when this call took it, None when held already."""
    key = _lock_key(target)
    if key in _held:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(10):  # a lock file removed by a failed save between our open and our lock: open it again
        try:
            fd, created = _open_lock(key)
        except FileNotFoundError:  # pragma: no cover - removed between the two opens
            continue
        if not _try_lock(fd):
            os.close(fd)
            raise CheckpointError(f"{target} is being written by another attnlab run (it holds the lock {key}); "
                                  "wait for that run to end, or choose another folder")
        try:
            same = os.stat(key).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            _held[key] = fd
            if created:
                _created.add(key)
            return key
        os.close(fd)
    raise CheckpointError(f"could not take the lock {key}: it keeps being replaced")  # pragma: no cover


def _release(key: str | None) -> None:
    if key is not None:
        os.close(_held.pop(key))  # closing the descriptor drops the lock
        _created.discard(key)


def _drop_lock(target: Path) -> None:
    """After a failed save or a refused run: the lock of ``target`` is given up, and its file removed when
    this process created it (so that a failed run leaves nothing behind; a file from before stays)."""
    key = _lock_key(target)
    if key not in _held:
        return
    if key in _created:
        try:
            os.unlink(key)  # while still locked: a process that opens it now sees another file (``_acquire``)
        except OSError:
            pass
    _release(key)


def _folder(directory: str | Path) -> Path:
    """The folder a save may replace; not the current folder, nor one that holds it."""
    path = Path(directory)
    try:
        refuse_package(path)  # the shipped models: read, never written
    except PermissionError as e:
        raise CheckpointError(str(e)) from None
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
        elif _record(p) is not None and p.name.endswith("new"):
            shutil.rmtree(p)  # replaced, or never finished (a complete one was put in place above)
        elif target.is_dir() and _record(p) is not None:
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


# The training command (``attnlab train VERB``) of each kind of checkpoint: its config's "kind" or its model's.
RUNS = {"char-lm": "lm", "gpt": "lm", "captioner": "caption", "seq2seq": "seq2seq", "transformer": "seq2seq"}


def run_kind(config: dict) -> str | None:
    """The ``attnlab train`` verb whose run wrote ``config`` (``lm``, ``seq2seq``, ``caption``); None if unknown."""
    model = config.get("model")
    kind = config.get("kind", model.get("kind") if isinstance(model, dict) else None)
    return RUNS.get(kind) if isinstance(kind, str) else None


def _last_step(folder: Path, config: dict) -> int | None:
    """The step the checkpoint was saved at: its state's, else its run log's last record."""
    state = config.get("state")
    step = state.get("step") if isinstance(state, dict) else None
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    from .runlog import read

    try:
        return max((r["step"] for r in read(folder)), default=None)
    except (OSError, ValueError):
        return None


def describe(directory: str | Path) -> str:
    """What the checkpoint in ``directory`` is, for a message: ``a `train lm` run (step 200, saved 2026-01-31 14:05)``."""
    from datetime import datetime

    folder = _readable(Path(directory))
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        saved = datetime.fromtimestamp((folder / "config.json").stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    except (OSError, ValueError):
        config, saved = {}, "at an unknown time"
    config = config if isinstance(config, dict) else {}
    kind, step = run_kind(config), _last_step(folder, config)
    what = f"an attnlab `train {kind}` run" if kind else "an attnlab checkpoint"
    return f"{what} ({'' if step is None else f'step {step}, '}saved {saved})"


def _check_intent(path: Path, run: str, resume: bool, overwrite: bool) -> None:
    """A training run of kind ``run`` writes into an existing checkpoint only when asked to (see check_out_dir)."""
    if resume and overwrite:
        raise CheckpointError(f"--resume continues the run in {path} and --overwrite replaces it: pass one of them")
    shown = _readable(path)
    if not is_checkpoint(shown):
        return
    if resume:
        try:
            theirs = run_kind(json.loads((shown / "config.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            theirs = None
        if theirs != run:
            hint = f"resume it with `attnlab train {theirs} --resume`" if theirs else f"give the folder of a `train {run}` run"
            raise CheckpointError(f"--resume: {path} holds {describe(path)}, not a `train {run}` run: "
                                  f"{hint}, or choose another --out")
    elif not overwrite:
        raise CheckpointError(f"{path} already holds {describe(path)}; pass --resume to continue it or --overwrite "
                              "to replace it, or choose another --out")


def check_out_dir(directory: str | Path, *, run: str | None = None, resume: bool = False,
                  overwrite: bool = False) -> Path:
    """A folder a command may write a checkpoint into: missing, empty, or an attnlab checkpoint.

    Raises ``CheckpointError`` for a file, a folder inside the attnlab package (its shipped
    models), or a folder of the user's that holds anything else (nothing of it would be kept
    otherwise), and when another run holds the folder's lock. With ``run`` (the training
    command's kind: ``lm``, ``seq2seq``, ``caption``), a folder that holds a checkpoint is
    refused unless ``resume`` (continue it; it must be a run of that kind) or ``overwrite``
    (replace it) says so; the message says what is there (kind, step, date). Then takes the
    folder's lock for the rest of this process, and finishes an interrupted save."""
    path = _folder(directory)
    _refuse_foreign(path)
    if _writes():
        _acquire(path)  # first: a run writing there now is what to say
    try:
        if run is not None:
            _check_intent(path, run, resume, overwrite)
        if _writes():
            _repair(path)
    except BaseException:
        _drop_lock(path)
        raise
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
    except BaseException as e:
        _drop_lock(target)  # a lock file this process made goes with the failed save
        if not isinstance(e, (OSError, SafetensorError)):
            raise
        cause = getattr(e, "strerror", None) or " ".join(str(e).split())
        raise CheckpointError(f"could not save the checkpoint {target}: {cause}; "
                              "the last checkpoint there (if any) is unchanged") from e
    finally:
        _release(key if key in _held else None)
    return target


# -- loading ------------------------------------------------------------------------------------------

# The counters of a run's ``state`` in config.json (``train.fit`` writes them, a resume reads them):
# field → (an integer or a finite number, its lowest value). A checkpoint is saved after a step: step >= 1.
STATE = {"step": (int, 1), "epoch": (int, 0), "loss_n": (int, 0), "loss_sum": (float, None),
         "train_time": (float, 0), "loss_ema": (float, None)}
MAX_STEP = 10**9


def _state_problem(v: Any, typ: type, lo: int | None) -> str | None:
    """What ``v`` must be when it is not that (None when it is)."""
    number = isinstance(v, (int, float)) and not isinstance(v, bool)
    if typ is int:
        if not (number and isinstance(v, int) and v >= lo):
            return f"an integer >= {lo}"
        return None if v <= MAX_STEP else f"an integer <= {MAX_STEP}"
    if not (number and math.isfinite(v) and (lo is None or v >= lo)):
        return "a finite number" + ("" if lo is None else f" >= {lo}")
    return None


def _show(v: Any) -> str:
    text = "null" if v is None else repr(v)  # as JSON names it
    return text if len(text) <= 60 else text[:57] + "..."


def check_state(config: dict, where: str) -> None:
    """A ``CheckpointError`` naming the field, its value and what it must be, for a run's ``kind`` that is
    not a string or names another kind of run than its model, or a ``state`` counter out of its range."""
    kind, model = config.get("kind"), config.get("model")
    if "kind" in config:
        if not isinstance(kind, str):
            raise CheckpointError(f"{where}: kind must be a string (a run's kind, e.g. 'char-lm'); got {_show(kind)}")
        theirs = model.get("kind") if isinstance(model, dict) else None
        if kind in RUNS and isinstance(theirs, str) and theirs in RUNS and RUNS[theirs] != RUNS[kind]:
            raise CheckpointError(f"{where}: kind {kind!r} is not the kind of its model ({theirs!r})")
    if "state" not in config:
        return
    state = config["state"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: state must be an object; got {_show(state)}")
    for name, (typ, lo) in STATE.items():
        problem = _state_problem(state[name], typ, lo) if name in state else None
        if problem is not None:
            raise CheckpointError(f"{where}: state.{name} must be {problem}; got {_show(state[name])}")


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
    check_state(config, str(cfg_file))
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{weights} is not a readable safetensors file: {e}") from None
    return tensors, config


def exists(directory: str | Path) -> bool:
    """True when a checkpoint folder can be read at ``directory``: itself, or a save's complete leftover
    while the save (or a kill during one) has it moved aside."""
    return _readable(Path(directory)).is_dir()


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
           "describe", "run_kind", "check_state", "exists", "CheckpointError", "FORMAT", "RUNS"]
