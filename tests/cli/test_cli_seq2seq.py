"""The command line of the translation lab: train → translate → evaluate, resume, bad input, the experiment."""

import json
import re
import shutil

import pytest
from evaluate_check import check_evaluate_against_translate

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
                                                 "metrics.jsonl", ".complete", ".attnlab-save"}
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["model"]["decoder"] == "bahdanau" and cfg["state"]["step"] == 20 and cfg["data"]["name"] == "numbers-de-en"


def test_translate_prints_output_and_alignment(run_dir, capsys, tmp_path):
    png = tmp_path / "a.png"
    assert main(["translate", "--checkpoint", str(run_dir), "vierhundertzwei", "--max-len", "4", "--picture", str(png)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("vierhundertzwei → ")
    indent = len(lines[1]) - 15
    assert lines[1] == " " * indent + "vierhundertzwei"  # the source characters head the columns
    rows = [ln for ln in lines[2:] if "←" in ln]
    # one row per output token (at most --max-len 4, plus </s> if it ended), each with one cell per source char
    assert 1 <= len(rows) <= 5 and len(lines) == 2 + len(rows) + 1 and lines[-1] == f"wrote {png}"
    for row in rows:
        assert set(row[indent : indent + 15]) <= set(" ·░▒▓█") and row[indent + 15 : indent + 19] == "  ← "
        char, weight = re.search(r"← '(.)' (\d\.\d\d)$", row).groups()
        assert char in "vierhundertzwei" and 0 < float(weight) <= 1  # the largest weight of a distribution
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["translate", "--checkpoint", str(run_dir), "zwei", "--beam", "3", "--no-alignment"]) == 0
    assert re.fullmatch(r"zwei → [^\n]*\n", capsys.readouterr().out)  # one line, no alignment


def test_the_alignment_picture_shows_the_weights_with_upright_source_labels(tmp_path, monkeypatch):
    plt = pytest.importorskip("matplotlib.pyplot")
    import torch

    from attnlab.cli.translate import plot_alignment

    drawn = []
    subplots = plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: drawn.append(subplots(*a, **k)) or drawn[-1])
    weights = torch.tensor([[0.875, 0.125, 0.0], [0.0, 0.25, 0.75]])
    png = tmp_path / "a.png"
    plot_alignment(str(png), ["a", " ", "b"], ["x", "</s>"], weights, title="t")
    fig, ax = drawn[0]
    assert ax.images[0].get_array().tolist() == [[0.875, 0.125, 0.0], [0.0, 0.25, 0.75]]
    assert [(t.get_text(), t.get_rotation()) for t in ax.get_xticklabels()] == [("a", 90), ("␣", 90), ("b", 90)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["x", "</s>"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("source", "output", "t")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_evaluate_matches_sacrebleu_on_translate_output(run_dir, capsys):
    check_evaluate_against_translate(run_dir, capsys, "bahdanau decoder")


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
    text = capsys.readouterr().out.splitlines()
    res = json.loads((out / "results.json").read_text())
    names = ["none", "bahdanau", "luong"]
    assert list(res["models"]) == names
    assert text[0] == "| source length | n | " + " | ".join(f"{m} exact / chrF" for m in names) + " |"
    # the printed table is results.json rounded: one row per bucket, then "all"
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in text[2:] if ln.startswith("| ") and "–" in ln or
            ln.startswith("| all")]
    buckets = [tuple(b) for b in res["buckets"]]
    assert len(rows) == len(buckets) + 1
    for i, row in enumerate(rows):
        for j, m in enumerate(names):
            r = res["models"][m]["by_length"][i] if i < len(buckets) else res["models"][m]["overall"]
            assert row[2 + j] == f"{r['exact']:.1f} / {r['chrf']:.1f}"
            assert 0 <= r["chrf"] <= 100 and 0 <= r["exact"] <= 100
        want_n = res["models"]["none"]["by_length"][i]["n"] if i < len(buckets) else res["models"]["none"]["overall"]["n"]
        assert row[0] == (f"{buckets[i][0]}–{buckets[i][1]}" if i < len(buckets) else "all") and row[1] == str(want_n)
    for m in names:
        by = res["models"][m]["by_length"]
        assert sum(r["n"] for r in by) == res["models"][m]["overall"]["n"] > 0
        assert [(r["lo"], r["hi"]) for r in by] == buckets
    assert (out / "bottleneck.png").read_bytes()[:4] == b"\x89PNG"


def test_a_luong_run_takes_its_score_and_says_what_it_trains_on_unless_quiet(tmp_path, capsys):
    loud = [a for a in TRAIN if a != "--quiet"]
    out = tmp_path / "luong"
    assert main([*loud, "--attention", "luong", "--score", "general", "--steps", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model"]["decoder"] == "luong" and cfg["model"]["luong_score"] == "general"
    data = re.search(r"^numbers-de-en: (\d+) train / (\d+) valid / (\d+) test pairs; ", text, re.M)
    assert data and sum(map(int, data.groups())) == 300  # --n 300, split three ways
    assert re.search(rf"^saved {re.escape(str(out))} at step 2", text, re.M)
    quiet = tmp_path / "quiet"
    assert main([*TRAIN, "--steps", "2", "--out", str(quiet)]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"saved {quiet} at step 2")  # no summary first


def test_tgt_level_picks_characters_or_words_for_the_target(tmp_path):
    tiny = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "100", "--max-digits", "2", "--emb", "8",
            "--hidden", "8", "--attn-dim", "8", "--batch-size", "16", "--eval-every", "0", "--save-every", "0",
            "--quiet", "--steps", "1"]
    for level in ("char", "word"):
        out = tmp_path / level
        assert main([*tiny, "--tgt-level", level, "--out", str(out)]) == 0
        vocab = json.loads((out / "tgt_vocab.json").read_text())
        assert vocab["level"] == level
        # English number words ("twenty", "forty") are target tokens only when the target is split into words
        assert ("twenty" in vocab["tokens"]) == (level == "word")
        assert all(len(t) == 1 for t in vocab["tokens"] if not t.startswith("<")) == (level == "char")
