"""Files written whole: a temporary file beside the target, fsynced, then renamed over it.

Every file attnlab writes goes through ``write_text``, ``write_bytes`` or, for writers that
take a path (matplotlib, PIL, a browser's screenshot), ``writing(path)``:

1. a new file ``.NAME.<random>.attnlab-tmp<suffix>`` is created in the target's folder
   (``O_EXCL``: never a file that already exists, so never one of the user's);
2. the content is written into it and fsynced;
3. ``os.replace`` puts it in place of ``NAME`` in one step, and the folder is fsynced.

Until step 3 the old ``NAME`` (if any) is untouched; after it the new one is whole. On any
failure (a full disk, a read-only folder, an exception of the writer, Ctrl-C) the temporary
file is removed and the error raised again as an ``OSError`` that names ``NAME`` (not the
temporary file) and the cause, e.g. ``No space left on device: out.html``; the command line
prints it as one line. A target that is a folder is refused before anything is written.
A file that replaces an existing one keeps that file's permission bits.

A folder attnlab writes files into (an experiment's ``--out``, ``caption --out``) follows one
rule, ``claim(folder, names)``, called before any work: the folder's marker ``.attnlab-files``
lists the files attnlab wrote there; a file of one of ``names`` that is there and not listed
is the user's, and the command is refused with one line naming it (nothing is written);
otherwise the names are added to the marker (written whole) and the files may be written.
Nothing inside the installed attnlab package (its shipped models) is a place to write:
``refuse_package`` refuses such a path (symlinks resolved), whatever the flags.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".attnlab-tmp"
OWNED = ".attnlab-files"  # in a folder attnlab writes files into: {"files": [the names it wrote]}
PACKAGE = Path(os.path.realpath(Path(__file__).parent))  # the installed package, shipped models included
BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation in os.write


def _named(e: OSError, path: Path) -> OSError:
    """``e`` again, naming ``path`` (the file the user asked for) instead of a temporary name."""
    return type(e)(e.errno, e.strerror or str(e), str(path))


def fsync_dir(path: str | Path) -> None:
    """Make a folder's entries (a rename, a new file) durable; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse to fsync a folder
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(path: Path) -> Path:
    """A new, empty temporary file beside ``path`` (mode 0o666 less the umask, as ``open`` makes)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}{SUFFIX}{path.suffix}")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | BINARY, 0o666))
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))  # pragma: no cover


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


@contextmanager
def writing(path: str | Path, *, package_ok: bool = False) -> Iterator[Path]:
    """``with writing(p) as tmp: fig.savefig(tmp)``: whatever is written to ``tmp`` becomes ``p`` whole.
    A path inside the installed package is refused (``refuse_package``) unless ``package_ok`` (the
    maintainers' script that makes the shipped models)."""
    path = Path(path)
    if not package_ok:
        refuse_package(path, "path")
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create(path)
    except OSError as e:
        raise _named(e, path) from None
    try:
        yield tmp
        if path.is_file():
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        _discard(tmp)
        if isinstance(e, OSError):
            raise _named(e, path) from None
        raise
    fsync_dir(path.parent)


def write_bytes(path: str | Path, data: bytes, *, package_ok: bool = False) -> Path:
    """Write ``data`` to ``path`` whole (see the module's docstring); returns ``Path(path)``."""
    with writing(path, package_ok=package_ok) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | BINARY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8", *, package_ok: bool = False) -> Path:
    """Write ``text`` to ``path`` whole (see the module's docstring); returns ``Path(path)``."""
    return write_bytes(path, text.encode(encoding), package_ok=package_ok)


def refuse_package(path: str | Path, flag: str = "--out") -> None:
    """A ``PermissionError`` for a path inside the installed attnlab package (symlinks resolved):
    its shipped models are read, never written, whatever the flags."""
    full = os.path.realpath(path)
    if full == str(PACKAGE) or full.startswith(str(PACKAGE) + os.sep):
        raise PermissionError(f"{path} is inside the attnlab package ({PACKAGE}), which holds its shipped models; "
                              f"attnlab never writes there (--overwrite included): choose another {flag}")


def owned(folder: str | Path) -> set[str]:
    """The names the marker of ``folder`` lists: the files attnlab wrote there (none without a marker)."""
    try:
        files = json.loads((Path(folder) / OWNED).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()


def claim(folder: str | Path, names: Iterable[str], flag: str = "--out") -> Path:
    """Before writing ``names`` into ``folder``: refuse (``FileExistsError``, one line naming the file)
    when one of them is there and the folder's marker does not list it (a file of the user's), or when
    ``folder`` is a file or inside the package; else make the folder and add the names to its marker."""
    folder, names = Path(folder), list(names)
    refuse_package(folder, flag)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder (it is a file)", str(folder))
    mine = owned(folder)
    for name in names:
        if os.path.lexists(folder / name) and name not in mine:
            raise FileExistsError(f"{folder / name} is not a file attnlab wrote (the folder's {OWNED} does not list "
                                  f"it), so it is left alone: move it away, or choose another {flag}")
    if not set(names) <= mine or not (folder / OWNED).is_file():
        write_text(folder / OWNED, json.dumps({"files": sorted(mine | set(names))}, indent=1) + "\n")
    return folder


__all__ = ["writing", "write_text", "write_bytes", "fsync_dir", "fsync_file", "SUFFIX", "OWNED", "claim", "owned",
           "refuse_package"]
