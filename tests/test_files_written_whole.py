"""attnlab._files: every file is written whole, through a temporary file of its own, or not at all."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from attnlab import _files


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_writes_and_replaces_whole_and_leaves_no_temporary_file(tmp_path):
    out = tmp_path / "sub" / "page.html"
    assert _files.write_text(out, "ünïcode") == out  # the folder is made
    assert out.read_bytes() == "ünïcode".encode()
    _files.write_bytes(out, b"\x00new")
    assert out.read_bytes() == b"\x00new" and _names(out.parent) == ["page.html"]


def test_the_users_files_named_like_a_temporary_file_are_left_alone(tmp_path):
    out = tmp_path / "x.html"
    mine = {"x.html.tmp": b"mine 1", ".x.html.tmp": b"mine 2", "x.html.tmp.png": b"mine 3"}
    for name, data in mine.items():
        (tmp_path / name).write_bytes(data)
    _files.write_text(out, "page")
    assert out.read_text() == "page"
    assert {n: (tmp_path / n).read_bytes() for n in mine} == mine
    assert _names(tmp_path) == sorted([*mine, "x.html"])


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path):
    out = tmp_path / "f.txt"
    out.write_text("old")
    os.chmod(out, 0o640)
    _files.write_text(out, "new")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        _files.write_text(tmp_path / "g.txt", "x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "g.txt").stat().st_mode) == 0o644  # as open() would make it


def test_a_folder_as_target_is_refused_naming_it(tmp_path):
    folder = tmp_path / "out.html"
    (folder / "inside").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as e:
        _files.write_text(folder, "page")
    assert e.value.filename == str(folder) and e.value.errno == errno.EISDIR
    assert _names(tmp_path) == ["out.html"] and _names(folder) == ["inside"]


def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_keeps_the_old_file_and_names_the_target(tmp_path, monkeypatch):
    out = tmp_path / "results.json"
    out.write_text("old")
    monkeypatch.setattr(os, "write", _full_disk)
    with pytest.raises(OSError) as e:
        _files.write_bytes(out, b"new" * 1000)
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out)
    assert out.read_text() == "old" and _names(tmp_path) == ["results.json"]


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES], ids=errno.errorcode.get)
def test_a_folder_that_cannot_be_written_names_the_target(tmp_path, monkeypatch, code):
    out = tmp_path / "page.html"
    out.write_text("old")
    real_open = os.open

    def refuse_new_files(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse_new_files)
    with pytest.raises(OSError) as e:
        _files.write_text(out, "new")
    assert e.value.errno == code and e.value.filename == str(out)  # not the temporary name
    assert out.read_text() == "old" and _names(tmp_path) == ["page.html"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "page.html").write_text("old")
    ro.chmod(0o555)
    try:
        with pytest.raises(PermissionError) as e:
            _files.write_text(ro / "page.html", "new")
        assert e.value.filename == str(ro / "page.html")
        assert (ro / "page.html").read_text() == "old" and _names(ro) == ["page.html"]
    finally:
        ro.chmod(0o755)


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path):
    out = tmp_path / "fig.png"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="drawing failed"):
        with _files.writing(out) as tmp:
            assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp.name.startswith(".fig.png.")
            tmp.write_bytes(b"half")
            raise RuntimeError("drawing failed")
    assert out.read_bytes() == b"old" and _names(tmp_path) == ["fig.png"]


def test_every_write_site_goes_through_the_writer():
    """No module writes a file itself: Path.write_text/write_bytes, open(..., "w"), a savefig or an
    image save into anything but the writer's temporary file, a rename of its own."""
    import re
    from pathlib import Path

    root = Path(_files.__file__).parent
    own = {root / "_files.py", root / "train" / "checkpoint.py"}  # the writer; the checkpoint swap (renames folders)
    patterns = [r"\.write_(text|bytes)\(", r"\bopen\([^)]*['\"][wax]", r"savefig\((?!tmp\b)", r"\.save\((?!tmp\b)",
                r"os\.(replace|rename)\(", r"\.(replace|rename)\(\w+\)", r"mkstemp\("]
    found = [f"{p.relative_to(root)}:{n}: {line.strip()}" for p in sorted(root.rglob("*.py")) if p not in own
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if any(re.search(pat, line) for pat in patterns)]
    assert not found, "files written around attnlab._files:\n  " + "\n  ".join(found)
