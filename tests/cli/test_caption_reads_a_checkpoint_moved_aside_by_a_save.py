"""``caption --checkpoint run`` while a save (or a kill during one) has ``run`` moved aside reads the
save's complete leftover, as every reader does, and writes nothing; a folder with nothing readable is
still refused in one line."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil

import pytest

from attnlab import pretrained
from attnlab.cli import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="Pillow is not installed")


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _tree(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_old_folder_of_a_save_killed_between_its_renames_is_read(tmp_path):
    old = tmp_path / ".cap.0123456789abcdef.attnlab-old"  # `cap` renamed aside, the new one not yet in place
    shutil.copytree(pretrained.folder("caption"), old)
    (old / ".attnlab-save").write_text(json.dumps({"folder": old.name}))
    before = _tree(tmp_path)
    code, out, err = _run(["caption", "--checkpoint", str(tmp_path / "cap"), "--no-overlays"])
    assert (code, err) == (0, "")
    assert out.startswith(f"image: {old / 'test-scenes' / '000.png'} (a held-out scene that ships with the model)\n")
    assert _tree(tmp_path) == before


def test_a_missing_checkpoint_is_still_one_line(tmp_path):
    code, _, err = _run(["caption", "--checkpoint", str(tmp_path / "cap")])
    assert (code, err) == (2, f"attnlab caption: error: no checkpoint at {tmp_path / 'cap'}; train one with "
                              "`attnlab train caption --out DIR`\n")
