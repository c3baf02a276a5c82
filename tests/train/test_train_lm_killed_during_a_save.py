"""``attnlab train lm`` killed (SIGKILL) before any one of the filesystem calls of its save, the first
save of a run and a save that moves an old checkpoint aside: after every kill a reader finds a complete
checkpoint of one step, or (a first save killed before it completed) none, and the same command line
goes on from there: a fresh run where there is none, ``--resume`` where there is one, leaving nothing
of the killed save behind."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal

import pytest

from attnlab.cli import main
from attnlab.train import fit as fit_module
from attnlab.train.checkpoint import exists, load_checkpoint
from tests.train.test_checkpoint_kill_anywhere import _counted  # the same kill at call n

pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
              pytest.mark.usefixtures("one_thread")]

CALLS = [(os, n) for n in ("open", "write", "fsync", "rename", "replace", "mkdir", "rmdir", "unlink", "chmod")]
CALLS += [(shutil, "rmtree")]
TEXT = "to be or not to be, that is the question. " * 20
TINY = ["--batch-size", "2", "--block-size", "8", "--dim", "8", "--num-layers", "1", "--num-heads", "1",
        "--eval-batches", "1", "--save-every", "0"]


def _quiet(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def _killed_in_its_save(n: int, argv: list[str]) -> bool:
    """Run ``argv`` in a forked child killed before the n-th filesystem call of its save; True when killed."""
    pid = os.fork()
    if pid == 0:
        try:
            real = fit_module.save_checkpoint

            def counting_save(*args, **kwargs):
                count = [0]
                for mod, attr in CALLS:
                    setattr(mod, attr, _counted(getattr(mod, attr), count, n))
                return real(*args, **kwargs)

            fit_module.save_checkpoint = counting_save
            os._exit(_quiet(argv))
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"the run failed before call {n}"
    return False


def _step(run) -> int | None:
    return load_checkpoint(run)[1]["state"]["step"] if exists(run) else None


@pytest.fixture
def no_disk_sync(monkeypatch):
    # A kill, unlike a power loss, keeps what the system has cached: fsync may skip the disk (still counted).
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _kills(tmp_path, prepare, argv_of, goes_on) -> list[int | None]:
    """For n = 1, 2, ...: kill the run before its save's n-th call, read what is left, go on; the steps read."""
    seen, n = [], 0
    while True:
        n += 1
        root = tmp_path / str(n)
        run = prepare(root)
        if not _killed_in_its_save(n, argv_of(root)):
            assert _step(run) == 4 if seen and seen[0] == 2 else _step(run) is not None
            return seen
        seen.append(_step(run))
        assert _quiet(goes_on(root, seen[-1])) == 0, n
        assert _step(run) is not None
        assert sorted(p.name for p in root.iterdir()) == [".run.lock", "run", "t.txt"], n
        shutil.rmtree(root)


def _text(root):
    root.mkdir(parents=True)
    (root / "t.txt").write_text(TEXT, encoding="utf-8")
    return root / "run"


def _lm(root, *more: str) -> list[str]:
    return ["train", "lm", "--text", str(root / "t.txt"), "--out", str(root / "run"), *TINY, *more]


def _resume(root, steps: int) -> list[str]:  # the text as the run's config.json records it
    return ["train", "lm", "--out", str(root / "run"), "--resume", "--steps", str(steps), "--save-every", "0"]


def test_a_first_save_killed_anywhere_leaves_nothing_or_the_checkpoint(tmp_path, no_disk_sync):
    def goes_on(root, step):  # none yet: the run again, fresh; a complete one: continued
        return _lm(root, "--steps", "2") if step is None else _resume(root, 3)

    seen = _kills(tmp_path, _text, lambda root: _lm(root, "--steps", "2"), goes_on)
    assert len(seen) > 10 and seen[0] is None and seen[-1] == 2
    assert seen == sorted(seen, key=lambda s: s is not None)  # once complete, it stays so


def test_a_save_that_moves_the_old_checkpoint_killed_anywhere_keeps_one(tmp_path, no_disk_sync):
    base = tmp_path / "base"
    _text(base)
    assert _quiet(_lm(base, "--steps", "2")) == 0

    def prepare(root):
        shutil.copytree(base, root)
        (root / ".run.lock").unlink()  # as a run of its own would find it: the lock file of an earlier process
        (root / ".run.lock").touch()
        return root / "run"

    seen = _kills(tmp_path, prepare, lambda root: _resume(root, 4), lambda root, step: _resume(root, 4))
    assert len(seen) > 10 and seen[0] == 2 and seen[-1] == 4
    assert seen == sorted(seen)  # the old checkpoint until the new one is whole, then the new one
