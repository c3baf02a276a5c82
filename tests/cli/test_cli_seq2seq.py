"""The command line of the translation lab: train → translate → evaluate, resume, bad input, the experiment."""

import json
import re
import shutil

import pytest

from attnlab.cli import main

TRAIN = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "300", "--max-digits", "3", "--emb", "8",
         "--hidden", "16", "--attn-dim", "16", "--batch-size", "16", "--eval-every", "10", "--save-every", "10", "--quiet"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main([*TRAIN, "--steps", "20", "--out", str(out)]) == 0
    return out


def test_checkpoint_layout(run_dir):
    assert {p.name for p in run_dir.iterdir()} == {"model.safetensors", "config.json", "src_vocab.json", "tgt_vocab.json",
                                                 "metrics.jsonl", ".complete"}
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model"]["decoder"] == "bahdanau" and cfg["state"]["step"] == 20 and cfg["data"]["name"] == "numbers-de-en"


def test_translate_prints_output_and_alignment(run_dir, capsys, tmp_path):
    png = tmp_path / "a.png"
    assert main(["translate", "--checkpoint", str(run_dir), "vierhundertzwei", "--max-len", "4", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vierhundertzwei → ")
    assert "   vierhundertzwei" in out and "←" in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["translate", "--checkpoint", str(run_dir), "zwei", "--beam", "3", "--no-alignment"]) == 0


def test_evaluate(run_dir, capsys):
    assert main(["evaluate", "--checkpoint", str(run_dir), "--limit", "10", "--buckets", "2"]) == 0
    out = capsys.readouterr().out
    assert "exact" in out and "BLEU" in out and "chrF" in out and "| source length |" in out


def test_resume_continues(run_dir, tmp_path, capsys):
    d = tmp_path / "r"
    shutil.copytree(run_dir, d)
    assert main(["train", "seq2seq", "--out", str(d), "--resume", "--steps", "30", "--quiet"]) == 0
    assert json.loads((d / "config.json").read_text())["state"]["step"] == 30
    assert main([*TRAIN, "--out", str(d)]) == 2  # refuses to overwrite a run without --resume
    assert "--resume" in capsys.readouterr().err


def _err(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.match(r"attnlab [\w ]+: error: ", err) and "Traceback" not in err
    return err


def test_bad_input_gives_clear_errors(run_dir, tmp_path, capsys):
    assert "'X'" in _err(capsys, ["translate", "--checkpoint", str(run_dir), "vierXhundert"])
    assert "empty" in _err(capsys, ["translate", "--checkpoint", str(run_dir), "  "])
    assert "at most" in _err(capsys, ["translate", "--checkpoint", str(run_dir), "zwei" * 200])
    assert "no checkpoint" in _err(capsys, ["translate", "--checkpoint", str(tmp_path / "nope"), "zwei"])
    assert "unknown dataset" in _err(capsys, [*TRAIN, "--data", "wmt14", "--out", str(tmp_path / "x")])
    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    assert "safetensors" in _err(capsys, ["translate", "--checkpoint", str(bad), "zwei"])
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    cfg = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**cfg, "format": 99}))
    assert "format" in _err(capsys, ["evaluate", "--checkpoint", str(old)])
    (old / "config.json").write_text(json.dumps({**cfg, "model": {**cfg["model"], "hidden": 32}}))
    assert "do not fit" in _err(capsys, ["translate", "--checkpoint", str(old), "zwei"])
    (old / "config.json").write_text(json.dumps(cfg))
    (old / "tgt_vocab.json").unlink()
    assert "tgt_vocab.json" in _err(capsys, ["translate", "--checkpoint", str(old), "zwei"])


def test_experiment_bottleneck_quick(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["experiment", "bottleneck", "--quick", "--quiet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "none exact / chrF" in text and "bahdanau" in text and "luong" in text
    res = json.loads((out / "results.json").read_text())
    assert set(res["models"]) == {"none", "bahdanau", "luong"}
    assert (out / "bottleneck.png").read_bytes()[:4] == b"\x89PNG"
