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
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUFFIX = ".attnlab-tmp"
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
def writing(path: str | Path) -> Iterator[Path]:
    """``with writing(p) as tmp: fig.savefig(tmp)``: whatever is written to ``tmp`` becomes ``p`` whole."""
    path = Path(path)
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


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole (see the module's docstring); returns ``Path(path)``."""
    with writing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | BINARY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    return Path(path)


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` whole (see the module's docstring); returns ``Path(path)``."""
    return write_bytes(path, text.encode(encoding))


__all__ = ["writing", "write_text", "write_bytes", "fsync_dir", "fsync_file", "SUFFIX"]
