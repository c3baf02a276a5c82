"""What a checkpoint folder holds, byte for byte where the format is written down (config.json with
its format and version first, ``.complete`` listing the save's files, the save's record), tensors
read back with their dtypes and values (safetensors, read here by safetensors itself), and every
refusal's full text."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import attnlab
from attnlab.train import checkpoint as C
from attnlab.train.checkpoint import (
    CheckpointError,
    check_out_dir,
    is_checkpoint,
    load_checkpoint,
    read_text,
    recover,
    save_checkpoint,
)


def test_the_folder_holds_the_documented_files_with_their_texts(tmp_path):
    run = tmp_path / "run"
    cfg = {"layers": 2, "name": "Größe"}
    assert (
        save_checkpoint(run, {"w": torch.zeros(1)}, cfg, {"vocab.json": '["ä"]', "b.txt": "x"})
        == run
    )
    assert sorted(p.name for p in run.iterdir()) == [
        ".attnlab-save",
        ".complete",
        "b.txt",
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]
    # format and version first, then the caller's config; indented by two, non-ASCII kept as it is
    meta = {"format": 1, "attnlab_version": attnlab.__version__, "layers": 2, "name": "Größe"}
    assert (run / "config.json").read_text(encoding="utf-8") == json.dumps(
        meta, indent=2, ensure_ascii=False
    )
    assert "Größe" in (run / "config.json").read_text(encoding="utf-8")
    assert list(json.loads((run / "config.json").read_text())) == [
        "format",
        "attnlab_version",
        "layers",
        "name",
    ]
    files = ["b.txt", "config.json", "model.safetensors", "vocab.json"]  # sorted
    assert (run / ".complete").read_text() == json.dumps({"files": files})
    record = json.loads((run / ".attnlab-save").read_text())
    assert list(record) == ["folder"]
    assert record["folder"].startswith(".run.") and record["folder"].endswith(".attnlab-new")
    assert len(record["folder"]) == len(".run.") + 16 + len(".attnlab-new")  # 8 random bytes in hex
    assert (run / "vocab.json").read_text(encoding="utf-8") == '["ä"]' and (
        run / "b.txt"
    ).read_text() == "x"
    assert C.FORMAT == 1 and C.MARKER == ".complete" and C.RECORD == ".attnlab-save"


def test_tensors_keep_their_dtypes_and_values_and_come_back_on_the_cpu(tmp_path):
    t = {
        "half": torch.tensor([1.5, -2.0], dtype=torch.float16),
        "long": torch.tensor([[1, 2], [3, 4]]),
        "flag": torch.tensor([True, False]),
        "view": torch.arange(6.0).reshape(2, 3).t(),  # not contiguous: saved as its values
        "bf": torch.tensor([0.5], dtype=torch.bfloat16),
    }
    t["grad"] = torch.ones(2, requires_grad=True) * 3  # saved detached
    save_checkpoint(tmp_path / "c", t, {})
    back = load_file(str(tmp_path / "c" / "model.safetensors"))  # the file itself
    assert sorted(back) == sorted(t)
    for k, v in t.items():
        assert (
            back[k].dtype == v.dtype
            and back[k].shape == v.shape
            and torch.equal(back[k], v.detach())
        ), k
    assert back["view"].tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    tensors, config, path = load_checkpoint(tmp_path / "c")
    assert path == tmp_path / "c" and config == {
        "format": 1,
        "attnlab_version": attnlab.__version__,
    }
    assert all(v.device.type == "cpu" for v in tensors.values())
    assert tensors["long"].dtype == torch.int64 and tensors["long"].tolist() == [[1, 2], [3, 4]]


def test_load_errors_in_full(tmp_path):
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "none")
    assert str(e.value) == f"no checkpoint folder at {tmp_path / 'none'}"
    d = save_checkpoint(tmp_path / "c", {"w": torch.ones(1)}, {})
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert str(e.value) == f"checkpoint {d} is missing model.safetensors"
    (d / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert str(e.value).startswith(
        f"{d / 'model.safetensors'} is not a readable safetensors file: "
    )
    (d / "config.json").write_text(json.dumps({"format": 2, "attnlab_version": "9.9"}))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert (
        str(e.value)
        == f"{d / 'config.json'} has checkpoint format 2 (written by attnlab 9.9); this attnlab reads format 1"
    )
    (d / "config.json").write_text(json.dumps({"layers": 1}))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert (
        str(e.value)
        == f"{d / 'config.json'} has checkpoint format None (written by attnlab ?); this attnlab reads format 1"
    )
    (d / "config.json").write_text("[1, 2]")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert (
        str(e.value)
        == f"{d / 'config.json'} has checkpoint format None (written by attnlab ?); this attnlab reads format 1"
    )
    (d / "config.json").write_text("{")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    assert str(e.value).startswith(f"{d / 'config.json'} is not valid JSON: Expecting")
    assert issubclass(CheckpointError, ValueError)


def test_read_text_reads_a_file_of_the_checkpoint_or_says_it_is_missing(tmp_path):
    d = save_checkpoint(tmp_path / "c", {"w": torch.ones(1)}, {}, {"vocab.json": "ünï"})
    assert read_text(d, "vocab.json") == "ünï"
    with pytest.raises(CheckpointError) as e:
        read_text(d, "merges.txt")
    assert str(e.value) == f"checkpoint {d} is missing merges.txt"


def test_is_checkpoint_needs_both_files_and_a_format(tmp_path):
    d = save_checkpoint(tmp_path / "c", {"w": torch.ones(1)}, {})
    assert is_checkpoint(d) and is_checkpoint(str(d))
    assert not is_checkpoint(tmp_path / "none")
    (d / "config.json").write_text(json.dumps({"layers": 1}))
    assert not is_checkpoint(d)  # no format
    (d / "config.json").write_text(json.dumps({"format": 7}))
    assert is_checkpoint(d)  # any format counts as ours (load says which it reads)
    (d / "config.json").write_text("{not json")
    assert not is_checkpoint(d)
    (d / "config.json").write_bytes(b"\xff\xfe\x00")
    assert not is_checkpoint(d)
    (d / "config.json").write_text(json.dumps({"format": 1}))
    (d / "model.safetensors").unlink()
    assert not is_checkpoint(d)


@pytest.mark.parametrize(
    "name",
    ["config.json", "model.safetensors", ".complete", ".attnlab-save", "a/b.txt", "", ".", ".."],
)
def test_an_extra_file_needs_a_plain_name_not_one_of_the_own(tmp_path, name):
    with pytest.raises(ValueError) as e:
        save_checkpoint(tmp_path / "c", {"w": torch.ones(1)}, {}, {name: "x"})
    assert str(e.value) == (
        "a checkpoint's extra file needs a plain file name other than "
        f"config.json, model.safetensors, .complete, .attnlab-save; got {name!r}"
    )
    assert not (tmp_path / "c").exists()


def test_refusals_of_a_foreign_folder_and_a_file_in_full(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    for n in ("f", "e", "d", "c", "b", "a"):
        (mine / n).write_text(n)
    with pytest.raises(CheckpointError) as e:
        check_out_dir(mine)
    assert str(e.value) == (
        f"{mine} is a folder that is not an attnlab checkpoint (it holds a, b, c, d, e); it is left alone: "
        "choose a new or empty folder"
    )
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(CheckpointError) as e:
        check_out_dir(f)
    assert (
        str(e.value)
        == f"{f} is a file, not a folder: choose a new or empty folder for the checkpoint"
    )
    # a folder holding only a TensorBoard log takes a checkpoint, and the log is carried along
    tb = tmp_path / "tb"
    (tb / "tensorboard").mkdir(parents=True)
    (tb / "tensorboard" / "events").write_text("e")
    assert check_out_dir(tb) == tb
    save_checkpoint(tb, {"w": torch.ones(1)}, {})
    assert (tb / "tensorboard" / "events").read_text() == "e" and is_checkpoint(tb)
    assert C.KEPT == ("tensorboard",)


def test_a_failed_save_names_the_folder_and_the_cause(tmp_path, monkeypatch):
    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.ones(1)}, {"n": 1})

    def full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("attnlab._files.write_bytes", full)
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(run, {"w": torch.zeros(1)}, {"n": 2})
    assert str(e.value) == (
        f"could not save the checkpoint {run}: No space left on device; the last checkpoint there (if any) is unchanged"
    )
    assert load_checkpoint(run)[1]["n"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".run.lock",
        "run",
    ]  # the new folder removed


def test_recover_puts_a_complete_leftover_back_and_says_so(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, {"w": torch.full((1,), 4.0)}, {})
    assert recover(run) is False  # nothing to repair
    aside = tmp_path / ".run.0123456789abcdef.attnlab-old"
    run.rename(aside)
    (aside / ".attnlab-save").write_text(json.dumps({"folder": aside.name}))
    assert load_checkpoint(run)[2] == aside  # read where it lies, nothing moved
    assert aside.exists() and not run.exists()
    assert recover(run) is True
    assert float(load_checkpoint(run)[0]["w"][0]) == 4.0 and not aside.exists()
