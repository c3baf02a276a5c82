"""A save killed (SIGKILL) before any one of its filesystem calls loses nothing.

The save runs in a forked child that counts its calls to the functions that change the file
system (``os.open``, ``os.write``, ``os.fsync``, ``os.rename``, ``os.replace``, ``os.mkdir``,
``os.rmdir``, ``os.unlink``, ``os.chmod``, ``shutil.rmtree``) and
kills itself before the N-th, for N = 1, 2, ... until a save runs to its end. After each kill:

- a reader gets the old checkpoint or the new one, whole (weights, config and vocabulary of
  one save), and once it has seen the new one it never sees the old one again at a later N;
- reading writes nothing (every file and folder as before, to the byte);
- the user's files survive untouched: siblings named like attnlab's old scheme
  (``.run.old-backup``, ``.run.tmp-mine``, ``run.tmp``), and a note and a ``tensorboard``
  folder inside the checkpoint;
- the next save succeeds, carries the user's files into the new checkpoint and leaves
  nothing behind but the lock file.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from attnlab.train.checkpoint import load_checkpoint, read_text, save_checkpoint

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

CALLS = [(os, n) for n in ("open", "write", "fsync", "rename", "replace", "mkdir", "rmdir", "unlink", "chmod")]
CALLS += [(shutil, "rmtree")]
SAVES = {name: ({"w": torch.full((4,), v), "b": torch.arange(3.0) * v}, {"run": name}, {"vocab.json": f'["{name}"]'})
         for name, v in (("old", 1.0), ("new", 2.0), ("next", 3.0))}


def _save_killed_before_call(n: int, run: Path, name: str) -> bool:
    """Save ``name`` in a forked child killed before its n-th call; True when it was killed."""
    pid = os.fork()
    if pid == 0:  # the child: count the calls, die at the n-th
        try:
            count = [0]
            for mod, attr in CALLS:
                setattr(mod, attr, _counted(getattr(mod, attr), count, n))
            save_checkpoint(run, *SAVES[name])
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"the save raised before call {n}"
    return False


def _counted(f, count: list[int], n: int):
    def call(*args, **kwargs):
        count[0] += 1
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return f(*args, **kwargs)

    return call


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``root``."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


USER = {".run.old-backup/mine.txt": b"backup", "run.tmp": b"a file of mine", "run/notes.txt": b"notes",
        "run/tensorboard/events": b"events"}


def _setup(root: Path) -> Path:
    run = root / "run"
    save_checkpoint(run, *SAVES["old"])
    for rel, data in USER.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / ".run.tmp-mine").mkdir()
    return run


def _which(run: Path) -> str:
    """The save a reader sees, checked whole: weights, config and vocabulary of one save."""
    tensors, config, path = load_checkpoint(run)
    name = config["run"]
    want = SAVES[name][0]
    assert set(tensors) == set(want) and all(torch.equal(tensors[k], want[k]) for k in want), name
    assert read_text(run, "vocab.json") == f'["{name}"]'
    return name


def _user_files_survive(root: Path, *, carried: bool) -> None:
    for rel, data in USER.items():
        if rel.startswith("run/") and not carried:  # may still sit in the old folder of the killed save
            assert any(p.read_bytes() == data for p in root.glob(f".run.*.attnlab-old/{rel[4:]}")) or \
                (root / rel).read_bytes() == data, rel
        else:
            assert (root / rel).read_bytes() == data, rel
    assert (root / ".run.tmp-mine").is_dir() and not any((root / ".run.tmp-mine").iterdir())


def _kills(tmp_path: Path, prepare, save: str) -> tuple[int, list[str]]:
    """Kill ``save`` before its call 1, 2, ... on the state ``prepare(root)`` makes; check each kill's state."""
    seen, n = [], 0
    while True:
        n += 1
        root = tmp_path / str(n)
        run = prepare(root)
        if not _save_killed_before_call(n, run, save):
            return n - 1, seen
        before = _snapshot(root)
        seen.append(_which(run))
        if not run.exists():  # moved aside: only ever after the new checkpoint was complete, read then
            assert seen[-1] != "old", n
        assert _snapshot(root) == before, f"reading wrote or deleted something (kill before call {n})"
        _user_files_survive(root, carried=False)
        save_checkpoint(run, *SAVES["next"])  # the next save repairs what the kill left
        assert _which(run) == "next"
        _user_files_survive(root, carried=True)
        left = {p.name for p in root.iterdir()}
        assert left == {"run", ".run.lock", ".run.old-backup", ".run.tmp-mine", "run.tmp"}, (n, left)
        shutil.rmtree(root)


@pytest.fixture
def no_disk_sync(monkeypatch):
    # A kill, unlike a power loss, keeps what the system has cached: fsync may skip the disk here
    # (it is still counted as a call), which keeps the test fast.
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def test_a_save_killed_before_any_filesystem_call_loses_nothing(tmp_path, no_disk_sync):
    kills, seen = _kills(tmp_path, _setup, "new")
    assert kills > 20 and _which(tmp_path / str(kills + 1) / "run") == "new"  # in the end the save ran whole
    assert seen[0] == "old" and seen[-1] == "new" and seen == sorted(seen, key=["old", "new"].index), seen


def test_the_repair_of_a_killed_swap_killed_anywhere_loses_nothing(tmp_path, no_disk_sync):
    """The worst state a kill leaves, ``run`` moved aside and the new folder not yet in its place,
    repaired by a save that is itself killed before each of its calls."""
    import attnlab.train.checkpoint as C

    base = tmp_path / "base"
    pid = os.fork()
    if pid == 0:
        C._on_step = lambda step: os.kill(os.getpid(), signal.SIGKILL) if step == "old moved" else None
        save_checkpoint(_setup(base), *SAVES["new"])
        os._exit(0)
    os.waitpid(pid, 0)
    assert not (base / "run").exists() and len(list(base.glob(".run.*.attnlab-*"))) == 2

    def prepare(root: Path) -> Path:
        shutil.copytree(base, root, symlinks=True)
        return root / "run"

    kills, seen = _kills(tmp_path, prepare, "next")
    assert kills > 20 and seen[0] == "new" and seen[-1] == "next"
    assert seen == sorted(seen, key=["new", "next"].index), seen
