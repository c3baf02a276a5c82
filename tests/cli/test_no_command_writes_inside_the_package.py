"""No command writes a file inside the installed attnlab package (its shipped models live there):
``view -o``, ``generate --attention-out`` and every other file written through attnlab's one
writer are refused in one line, before anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import attnlab
from attnlab import _files

PACKAGE = Path(attnlab.__file__).resolve().parent


def test_the_one_writer_refuses_a_path_inside_the_package():
    target = PACKAGE / "pretrained" / "char-gpt" / "notes.txt"
    with pytest.raises(PermissionError) as e:
        _files.write_text(target, "x")
    assert str(e.value) == (f"{target} is inside the attnlab package ({PACKAGE}), which holds its shipped models; "
                            "attnlab never writes there (--overwrite included): choose another path")
    assert not target.exists()


@pytest.mark.parametrize("argv", [
    ["view", "--example", "tutorial1-additive", "-o", str(PACKAGE / "view.html")],
    ["generate", "--pretrained", "char-gpt", "--text", "To be", "--tokens", "2",
     "--attention-out", str(PACKAGE / "pretrained" / "maps.json")],
])
def test_commands_aimed_inside_the_package_are_one_line(argv):
    run = subprocess.run([sys.executable, "-m", "attnlab", *argv], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and "is inside the attnlab package" in err[0] and "Traceback" not in run.stderr
    assert not Path(argv[-1]).exists()
