"""``attnlab train caption``, with the training and the save replaced by recorders: each flag reaches
``CaptionTrainConfig`` (an unset flag keeps its default), ``--resume`` takes the run's saved config (only
--on-nonfinite and --max-seconds override it), the training's records reach the save and TensorBoard, the
closing line (the final loss to 3 decimals, the folder, the held-out scenes when there are any), and each
refusal as one exact line (exit 2) before any training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import attnlab.train.caption as caption_training
import attnlab.train.runtime as runtime
from attnlab import pretrained
from attnlab.cli import main
from attnlab.train.caption import CaptionTrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def trained(monkeypatch):
    seen = {"test": [1]}

    def fake_train(cfg, **kwargs):
        seen.update(cfg=cfg, **kwargs)
        result = {
            "scores": {"exact": 50.0},
            "test": seen["test"],
            "records": [{"step": 1}, {"step": 2}],
        }
        return "MODEL", "VOCAB", [2.0, 0.12345], result

    def fake_save(out, model, vocab, cfg, **kwargs):
        seen["saved"] = dict(out=out, model=model, vocab=vocab, cfg=cfg, **kwargs)
        return Path(out)

    class Log:
        def __init__(self, tensorboard):
            seen["tensorboard"], seen["added"] = tensorboard, []

        def add(self, record):
            seen["added"].append(record)

        def close(self):
            seen["closed"] = True

    monkeypatch.setattr(caption_training, "train_captioner", fake_train)  # the verb imports them as it runs
    monkeypatch.setattr(caption_training, "save_captioner", fake_save)
    monkeypatch.setattr(runtime, "RunLog", Log)
    return seen


def test_every_flag_reaches_the_config_and_the_lines_are_printed(tmp_path, trained, capsys):
    out = tmp_path / "cap"
    argv = [
        "train",
        "caption",
        "--out",
        str(out),
        "--data",
        "emoji",
        "--caption-lang",
        "de",
        "--n-train",
        "7",
        "--n-test",
        "3",
        "--cells",
        "4",
        "--max-objects",
        "2",
        "--pool",
        "5",
        "--limit",
        "9",
        "--epochs",
        "2",
        "--batch-size",
        "6",
        "--lr",
        "0.5",
        "--dim",
        "12",
        "--num-heads",
        "3",
        "--decoder",
        "transformer",
        "--num-layers",
        "1",
        "--image-size",
        "40",
        "--seed",
        "8",
        "--on-nonfinite",
        "skip",
        "--max-seconds",
        "4.5",
        "--tensorboard",
    ]
    assert main(argv) == 0
    assert trained["cfg"] == CaptionTrainConfig(
        data="emoji",
        lang="de",
        n_train=7,
        n_test=3,
        cells=4,
        max_objects=2,
        pool=5,
        limit=9,
        epochs=2,
        batch_size=6,
        lr=0.5,
        d_model=12,
        num_heads=3,
        decoder="transformer",
        layers=1,
        image_size=40,
        seed=8,
        on_nonfinite="skip",
        max_seconds=4.5,
    )
    assert (trained["out"], trained["resume"], trained["progress"], trained["runtime"].is_main) == (
        str(out),
        False,
        True,
        True,
    )
    saved = trained["saved"]
    assert (saved["out"], saved["model"], saved["vocab"], saved["cfg"]) == (
        str(out),
        "MODEL",
        "VOCAB",
        trained["cfg"],
    )
    assert (saved["scores"], saved["examples"], saved["records"]) == (
        {"exact": 50.0},
        [1],
        [{"step": 1}, {"step": 2}],
    )
    assert trained["tensorboard"] == out / "tensorboard"
    assert trained["added"] == [{"step": 1}, {"step": 2}] and trained["closed"]
    assert capsys.readouterr().out == (
        f"final loss 0.123; wrote {out} (held-out scenes to try: {out / 'test-scenes'}/)\n"
    )


def test_unset_flags_keep_the_defaults_and_no_test_scenes_no_hint(tmp_path, trained, capsys):
    trained["test"] = None
    out = tmp_path / "cap"
    assert main(["train", "caption", "--out", str(out)]) == 0
    assert trained["cfg"] == CaptionTrainConfig()
    assert (CaptionTrainConfig().data, CaptionTrainConfig().epochs, CaptionTrainConfig().lr) == (
        "scenes",
        20,
        0.01,
    )
    assert "tensorboard" not in trained  # no --tensorboard: no log written
    assert capsys.readouterr().out == f"final loss 0.123; wrote {out}\n"


def test_one_is_enough_for_every_positive_flag(tmp_path, trained):
    flags = [
        "--epochs",
        "--batch-size",
        "--dim",
        "--num-heads",
        "--n-train",
        "--n-test",
        "--pool",
        "--limit",
        "--num-layers",
    ]
    argv = [
        "train",
        "caption",
        "--out",
        str(tmp_path / "c"),
        "--data",
        "emoji",
        "--cells",
        "1",
        "--max-objects",
        "1",
        "--image-size",
        "1",
    ]
    for flag in flags:
        argv += [flag, "1"]
    assert main(argv) == 0 and trained["cfg"].epochs == 1


def test_resume_takes_the_saved_config(tmp_path, trained, capsys):
    run = tmp_path / "cap"
    shutil.copytree(pretrained.folder("caption"), run)
    assert (
        main(
            [
                "train",
                "caption",
                "--out",
                str(run),
                "--resume",
                "--epochs",
                "3",
                "--on-nonfinite",
                "skip",
                "--max-seconds",
                "2",
            ]
        )
        == 0
    )
    assert trained["cfg"] == CaptionTrainConfig(
        data="scenes",
        lang="en",
        n_train=4000,
        n_test=500,
        cells=3,
        max_objects=3,
        pool=16,
        image_size=48,
        widths=(16, 32, 64),
        d_model=64,
        num_heads=2,
        decoder="gru",
        layers=2,
        epochs=20,
        batch_size=32,
        lr=0.01,
        seed=0,
        on_nonfinite="skip",
        max_seconds=2.0,
    )  # the run's own config.json; --epochs 3 not taken
    assert trained["resume"] is True


@pytest.mark.parametrize(
    "flag, name",
    [
        ("--epochs", "--epochs"),
        ("--batch-size", "--batch-size"),
        ("--dim", "--dim"),
        ("--num-heads", "--num-heads"),
        ("--image-size", "--image-size"),
        ("--n-train", "--n-train"),
        ("--n-test", "--n-test"),
        ("--cells", "--cells"),
        ("--max-objects", "--max-objects"),
        ("--pool", "--pool"),
        ("--limit", "--limit"),
        ("--num-layers", "--num-layers"),
        ("--d-model", "--dim"),
        ("--heads", "--num-heads"),
        ("--layers", "--num-layers"),
    ],
)
def test_a_flag_below_one_is_refused_by_its_name(tmp_path, trained, capsys, flag, name):
    assert main(["train", "caption", "--out", str(tmp_path / "c"), flag, "0"]) == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == f"attnlab train caption: error: {name} must be >= 1; got 0"
    )
    assert "cfg" not in trained


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lr", "0"], "--lr must be > 0; got 0.0"),
        (["--lr", "-1"], "--lr must be > 0; got -1.0"),
        (["--cells", "5"], "canvas 48 must be a multiple of cells 5"),
        (
            ["--cells", "2", "--max-objects", "5"],
            "need 1 <= min_objects <= max_objects <= cells² = 4; got min_objects=1, max_objects=5",
        ),
    ],
)
def test_bad_settings_are_refused_before_training(tmp_path, trained, capsys, flags, message):
    assert main(["train", "caption", "--out", str(tmp_path / "c"), *flags]) == 2
    assert capsys.readouterr().err == f"attnlab train caption: error: {message}\n"
    assert "cfg" not in trained


def test_the_scene_grid_is_checked_for_scenes_only(tmp_path, trained):
    assert (
        main(["train", "caption", "--out", str(tmp_path / "c"), "--data", "emoji", "--cells", "5"])
        == 0
    )
    assert trained["cfg"].cells == 5


def test_a_file_is_not_a_checkpoint_folder(tmp_path, trained, capsys):
    f = tmp_path / "f"
    f.write_text("mine")
    assert (
        main(["train", "caption", "--out", str(f), "--epochs", "0"]) == 2
    )  # the folder is checked first
    assert capsys.readouterr().err.startswith(
        f"attnlab train caption: error: {f} is a file, not a folder"
    )
    assert f.read_text() == "mine" and "cfg" not in trained
