"""Every command that writes files into a folder (the experiments' ``--out``, ``caption --out``) follows
one rule: it overwrites only files that its folder's marker ``.attnlab-files`` lists as its own. A
``table.md``, ``results.json`` or ``caption.png`` of the user's is refused in one line naming it, before
any work, and keeps its bytes; a second run over attnlab's own files writes them again."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import pytest

from attnlab import pretrained
from attnlab._files import claim, owned, write_text
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")

# experiment → a file its run writes
EXPERIMENTS = {"alignment": "table.md", "bottleneck": "results.json", "distance": "table.md",
               "faithfulness": "results.json", "length": "table.md", "recommendation": "results.json",
               "rope-scaling": "table.md", "vision": "results.md"}


def _refusal(path) -> str:
    return (f"{path} is not a file attnlab wrote (the folder's .attnlab-files does not list it), so it is left "
            "alone: move it away, or choose another --out")


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_an_experiment_refuses_a_users_file_of_its_name(tmp_path, name):
    out = tmp_path / "results"
    out.mkdir()
    mine = out / EXPERIMENTS[name]
    mine.write_text("my own notes", encoding="utf-8")
    code, err = _run(["experiment", name, "--quick", "--out", str(out)])
    assert (code, err) == (2, f"attnlab experiment {name}: error: {_refusal(mine)}\n")
    assert mine.read_text(encoding="utf-8") == "my own notes"
    assert sorted(p.name for p in out.iterdir()) == [mine.name]  # nothing written, no marker either


@pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="Pillow is not installed")
def test_caption_out_refuses_a_users_caption_png(tmp_path):
    out = tmp_path / "maps"
    out.mkdir()
    (out / "caption.png").write_bytes(b"my picture")
    scene = pretrained.folder("caption") / "test-scenes" / "000.png"
    code, err = _run(["caption", "--pretrained", "caption", str(scene), "--out", str(out)])
    assert (code, err) == (2, f"attnlab caption: error: {_refusal(out / 'caption.png')}\n")
    assert (out / "caption.png").read_bytes() == b"my picture"
    assert sorted(p.name for p in out.iterdir()) == ["caption.png"]


def test_the_rule_overwrites_only_what_the_marker_lists(tmp_path):
    out = tmp_path / "out"
    claim(out, ["table.md", "results.json"])
    write_text(out / "table.md", "first")
    assert owned(out) == {"table.md", "results.json"}
    claim(out, ["table.md", "plot.png"])  # a second run: its own table.md again, and a new name
    assert json.loads((out / ".attnlab-files").read_text()) == {"files": ["plot.png", "results.json", "table.md"]}
    (out / "notes.md").write_text("mine")
    with pytest.raises(FileExistsError) as e:
        claim(out, ["table.md", "notes.md"])
    assert str(e.value) == _refusal(out / "notes.md")
    assert owned(out) == {"plot.png", "results.json", "table.md"}  # a refusal adds nothing
    (out / ".attnlab-files").write_text("not json")  # a broken marker lists nothing: every file is the user's
    with pytest.raises(FileExistsError):
        claim(out, ["table.md"])
    assert (out / "table.md").read_text() == "first" and (out / "notes.md").read_text() == "mine"


def test_a_file_is_not_a_folder_to_write_into(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(NotADirectoryError) as e:
        claim(f, ["table.md"])
    assert str(e.value) == f"[Errno 20] not a folder (it is a file): '{f}'"


def test_faithfulness_of_a_run_refuses_before_it_measures(tmp_path, monkeypatch):
    import attnlab.cli.experiment_faithfulness as cli

    monkeypatch.setattr(cli, "measure_run", lambda *a: pytest.fail("measured before the folder was checked"))
    out = tmp_path / "results"
    out.mkdir()
    (out / "table.md").write_text("my own notes", encoding="utf-8")
    code, err = _run(["experiment", "faithfulness", "--checkpoint", str(tmp_path / "some-run"), "--out", str(out)])
    assert (code, err) == (2, f"attnlab experiment faithfulness: error: {_refusal(out / 'table.md')}\n")
    assert (out / "table.md").read_text(encoding="utf-8") == "my own notes"
