"""What the commands write is written whole or not at all, and nothing of the user's is touched.

A full disk (ENOSPC, simulated where attnlab writes), a folder that cannot be written, or an
output path that is a folder gives one line naming the path and the cause (exit 2), keeps the
old file and leaves no temporary file. Reading a checkpoint (generate) writes and deletes nothing.
"""

from __future__ import annotations

import errno
import os

import pytest

from attnlab.cli import main
from attnlab.train.checkpoint import load_checkpoint


def _one_line_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "internal error" not in err, (code, err)
    return err


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _snapshot(root) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _fail_with(monkeypatch, code: int) -> None:
    """Every new file refused (EROFS, EACCES), or every write (ENOSPC): what attnlab's writer meets."""
    if code == errno.ENOSPC:
        def write(fd, data):
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(os, "write", write)
        return
    real_open = os.open

    def refuse(path, flags, *args):
        if flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refuse)


VIEW = ["view", "--example", "tutorial1-additive"]


def test_view_leaves_the_users_tmp_files_alone(tmp_path, capsys):
    out = tmp_path / "x.html"
    for name in ("x.html.tmp", ".x.html.tmp"):
        (tmp_path / name).write_text("mine")
    assert main([*VIEW, "-o", str(out)]) == 0
    assert "<html" in out.read_text(encoding="utf-8").lower()
    assert all((tmp_path / n).read_text() == "mine" for n in ("x.html.tmp", ".x.html.tmp"))
    assert _names(tmp_path) == [".x.html.tmp", "x.html", "x.html.tmp"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES], ids=errno.errorcode.get)
def test_view_on_a_full_or_read_only_disk_keeps_the_old_page(tmp_path, capsys, monkeypatch, code):
    out = tmp_path / "x.html"
    out.write_text("old page")
    _fail_with(monkeypatch, code)
    err = _one_line_error(capsys, [*VIEW, "-o", str(out)])
    assert err == f"attnlab view: error: {os.strerror(code)}: {out}"
    assert out.read_text() == "old page" and _names(tmp_path) == ["x.html"]


def test_view_into_a_folder_touches_nothing(tmp_path, capsys):
    folder = tmp_path / "x.html"
    (folder / "mine").mkdir(parents=True)
    err = _one_line_error(capsys, [*VIEW, "-o", str(folder)])
    assert str(folder) in err and os.strerror(errno.EISDIR) in err
    assert _names(tmp_path) == ["x.html"] and _names(folder) == ["mine"]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    text = root / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 4, encoding="utf-8")
    args = ["train", "lm", "--text", str(text), "--batch-size", "2", "--block-size", "16", "--dim", "16",
            "--num-layers", "1", "--num-heads", "2", "--eval-every", "0", "--eval-batches", "1"]
    return root, args


def _train(lm_run, tmp_path, capsys):
    root, args = lm_run
    run = tmp_path / "run"
    assert main([*args, "--steps", "2", "--out", str(run)]) == 0
    capsys.readouterr()
    return run, args


def test_generate_writes_and_deletes_nothing_beside_the_checkpoint(lm_run, tmp_path, capsys):
    run, _ = _train(lm_run, tmp_path, capsys)
    (tmp_path / ".run.old-backup").mkdir()
    (tmp_path / ".run.old-backup" / "weights").write_bytes(b"my backup")
    (tmp_path / ".run.tmp-mine").mkdir()
    (tmp_path / "run.tmp").write_text("mine")
    before = _snapshot(tmp_path)
    assert main(["generate", "--checkpoint", str(run), "--text", "to", "--tokens", "3"]) == 0
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=errno.errorcode.get)
def test_generate_attention_out_on_a_full_or_read_only_disk(lm_run, tmp_path, capsys, monkeypatch, code):
    run, _ = _train(lm_run, tmp_path, capsys)
    out = tmp_path / "att.json"
    out.write_text("old")
    _fail_with(monkeypatch, code)
    err = _one_line_error(capsys, ["generate", "--checkpoint", str(run), "--text", "to", "--tokens", "2",
                                   "--attention-out", str(out)])
    assert err == f"attnlab generate: error: {os.strerror(code)}: {out}"
    assert out.read_text() == "old" and ".att.json" not in " ".join(_names(tmp_path))


def test_a_full_disk_during_a_checkpoint_save_keeps_the_last_checkpoint(lm_run, tmp_path, capsys, monkeypatch):
    run, args = _train(lm_run, tmp_path, capsys)
    before = load_checkpoint(run)[0]
    _fail_with(monkeypatch, errno.ENOSPC)
    err = _one_line_error(capsys, [*args, "--steps", "4", "--out", str(run), "--resume"])
    assert err.startswith(f"attnlab train lm: error: could not save the checkpoint {run}: No space left on device")
    monkeypatch.undo()
    after, config, _ = load_checkpoint(run)
    assert config["state"]["step"] == 2 and all(after[k].equal(v) for k, v in before.items())
    # nothing of the failed save is left (the lock file is the first run's: tests/train/test_failed_save_leaves_no_lock.py)
    assert [n for n in _names(tmp_path) if n != ".run.lock"] == ["run"]
