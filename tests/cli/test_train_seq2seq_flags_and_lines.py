"""``attnlab train seq2seq``, with ``fit`` replaced by a recorder: each model flag reaches the model's config
(RNN and Transformer, the dropout defaults 0 and 0.1, the layers to both stacks), each training flag the
training config, the corpus and vocabularies the task, ``--quiet`` / ``--tensorboard`` / ``--resume`` the
call; the summary line before and the "saved" line after; ``--resume`` reads the run's own data and
training config (overridden by --steps and --max-seconds); and every refusal as one exact line, exit 2."""

from __future__ import annotations

import json
import shutil
import types
from datetime import datetime

import pytest

import attnlab.train.fit as fit_module
from attnlab import pretrained
from attnlab.cli import main
from attnlab.cli.train_seq2seq import _flag_names
from attnlab.train.loop import TrainConfig, progress_lines

pytestmark = pytest.mark.usefixtures("one_thread")

# numbers-de-en with --n 200: 5 % valid, 5 % test (data/numbers.py) → 180 / 10 / 10 pairs
TINY = ["train", "seq2seq", "--n", "200", "--max-digits", "3"]


@pytest.fixture
def fitted(monkeypatch):
    seen = {}

    def fake_fit(task, config, runtime, out, **kwargs):
        seen.update(task=task, config=config, out=out, **kwargs)
        return types.SimpleNamespace(
            step=7, valid=seen.get("valid", {"loss": 1.23456, "exact": 12.345})
        )

    monkeypatch.setattr(fit_module, "fit", fake_fit)
    return seen


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_rnn_flags_reach_the_model_and_training_configs(tmp_path, fitted, capsys):
    out = tmp_path / "run"
    argv = [
        *TINY,
        "--attention",
        "luong",
        "--score",
        "concat",
        "--rnn",
        "lstm",
        "--emb",
        "4",
        "--hidden",
        "5",
        "--attn-dim",
        "6",
        "--unidirectional",
        "--dropout",
        "0.25",
        "--steps",
        "11",
        "--batch-size",
        "9",
        "--lr",
        "0.5",
        "--seed",
        "3",
        "--eval-every",
        "4",
        "--save-every",
        "5",
        "--log-every",
        "2",
        "--on-nonfinite",
        "skip",
        "--max-seconds",
        "1.5",
        "--tensorboard",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    task = fitted["task"]
    c = task.model.config
    assert (
        c.decoder,
        c.luong_score,
        c.rnn,
        c.emb_dim,
        c.hidden,
        c.attn_dim,
        c.bidirectional,
        c.dropout,
    ) == ("luong", "concat", "lstm", 4, 5, 6, False, 0.25)
    assert task.cfg == TrainConfig(
        steps=11,
        batch_size=9,
        lr=0.5,
        seed=3,
        eval_every=4,
        save_every=5,
        log_every=2,
        on_nonfinite="skip",
        max_seconds=1.5,
    )
    assert (fitted["config"].steps, fitted["config"].desc) == (11, "train")
    assert fitted["out"] == out
    assert (fitted["resume"], fitted["progress"], fitted["log"], fitted["tensorboard"]) == (
        False,
        True,
        progress_lines,
        True,
    )
    assert (len(task.train_examples), len(task.valid_examples)) == (180, 10)
    assert task.extra["data"] == {
        "name": "numbers-de-en",
        "n": 200,
        "seed": 3,
        "max_digits": 3,
        "path": None,
        "src_level": "char",
        "tgt_level": "word",
    }
    assert task.extra["max_src_len"] == max(len(s) for s, _ in task.train_examples)
    assert sorted(task.files) == ["src_vocab.json", "tgt_vocab.json"]
    src, tgt = (json.loads(task.files[f]) for f in ("src_vocab.json", "tgt_vocab.json"))
    assert c.src_vocab == len(src["tokens"]) and c.tgt_vocab == len(tgt["tokens"])
    assert capsys.readouterr().out.splitlines() == [
        f"numbers-de-en: 180 train / 10 valid / 10 test pairs; vocab {c.src_vocab} → {c.tgt_vocab}; "
        f"luong decoder, {_params(task.model):,} parameters",
        f"saved {out} at step 7: valid loss 1.235, exact match 12.3%",
    ]


def test_rnn_defaults_and_quiet(tmp_path, fitted, capsys):
    fitted["valid"] = {}
    out = tmp_path / "run"
    assert main([*TINY, "--quiet", "--out", str(out)]) == 0
    task = fitted["task"]
    c = task.model.config
    assert (
        c.decoder,
        c.luong_score,
        c.rnn,
        c.emb_dim,
        c.hidden,
        c.attn_dim,
        c.bidirectional,
        c.dropout,
    ) == ("bahdanau", "general", "gru", 64, 128, 128, True, 0.0)
    assert task.cfg == TrainConfig() and TrainConfig().steps == 3000
    assert (fitted["progress"], fitted["log"], fitted["tensorboard"]) == (False, None, False)
    assert task.extra["data"]["seed"] == 0 and task.extra["data"]["max_digits"] == 3
    assert capsys.readouterr().out == f"saved {out} at step 7: not validated\n"


def test_transformer_flags_reach_its_config(tmp_path, fitted, capsys):
    out = tmp_path / "run"
    argv = [
        *TINY,
        "--model",
        "transformer",
        "--num-layers",
        "3",
        "--num-heads",
        "2",
        "--dim",
        "8",
        "--ff",
        "12",
        "--positional",
        "learned",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    model = fitted["task"].model
    c = model.config
    assert (
        c.dim,
        c.num_heads,
        c.num_encoder_layers,
        c.num_decoder_layers,
        c.ffn_dim,
        c.positional,
        c.dropout,
    ) == (8, 2, 3, 3, 12, "learned", 0.1)
    longest = max(max(len(s), len(t)) for s, t in fitted["task"].train_examples)
    assert c.max_len == max(256, 4 * longest + 16) == 256  # numbers below 1,000: short sentences
    assert (
        capsys.readouterr()
        .out.splitlines()[0]
        .endswith(
            f"; transformer (3+3 layers, 2 heads, dim 8, learned positions), {_params(model):,} parameters"
        )
    )
    assert (
        main(
            [
                *TINY,
                "--model",
                "transformer",
                "--dim",
                "8",
                "--num-heads",
                "2",
                "--dropout",
                "0",
                "--out",
                str(tmp_path / "r2"),
            ]
        )
        == 0
    )
    assert fitted["task"].model.config.dropout == 0.0
    assert fitted["task"].model.config.num_encoder_layers == 2  # the documented default


def test_resume_reads_the_runs_own_data_and_config(tmp_path, fitted, capsys):
    run = tmp_path / "run"
    shutil.copytree(pretrained.folder("zh-en-numbers"), run)
    saved = json.loads((run / "config.json").read_text())
    assert (
        main(
            [
                "train",
                "seq2seq",
                "--out",
                str(run),
                "--resume",
                "--steps",
                "5",
                "--max-seconds",
                "9",
                "--quiet",
            ]
        )
        == 0
    )
    task = fitted["task"]
    assert task.cfg == TrainConfig(**{**saved["train"], "steps": 5, "max_seconds": 9.0})
    assert task.extra == {"data": saved["data"], "max_src_len": saved["max_src_len"]}
    assert fitted["resume"] is True and task.model.training
    assert (len(task.train_examples), len(task.valid_examples)) == (
        18000,
        1000,
    )  # its 20,000 numbers, 90/5/5
    assert (
        capsys.readouterr().out == f"saved {run} at step 7: valid loss 1.235, exact match 12.3%\n"
    )


def _refused(capsys, argv, message):
    assert main(argv) == 2
    assert capsys.readouterr().err == f"attnlab train seq2seq: error: {message}\n"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--dropout", "1"], "--dropout must be in [0, 1); got 1.0"),
        (["--dropout", "-0.5"], "--dropout must be in [0, 1); got -0.5"),
        (["--steps", "0"], "--steps must be >= 1; got 0"),
        (["--numbers", "0"], "--numbers must be >= 1; got 0"),
        (["--emb", "0"], "--emb must be >= 1; got 0"),
        (["--ff", "0"], "--ff must be >= 1; got 0"),
        (["--num-layers", "0"], "--num-layers must be >= 1; got 0"),
        (
            ["--model", "transformer", "--dim", "10", "--num-heads", "4"],
            "--dim must be a multiple of num_heads; got --dim=10, --num-heads=4",
        ),
        (
            ["--n", "11"],
            "the numbers-de-en corpus gives 9 training and 1 validation pairs; at least 10 and 1 are "
            "needed (raise --n)",
        ),
    ],
)
def test_bad_flags_are_refused_before_training(tmp_path, fitted, capsys, flags, message):
    _refused(capsys, ["train", "seq2seq", *flags, "--out", str(tmp_path / "run")], message)
    assert fitted == {}


def test_ten_training_pairs_are_enough(tmp_path, fitted, capsys):
    assert main(["train", "seq2seq", "--n", "12", "--quiet", "--out", str(tmp_path / "run")]) == 0
    assert len(fitted["task"].train_examples) == 10


def test_a_checkpoint_is_not_overwritten_and_a_foreign_one_not_resumed(tmp_path, fitted, capsys):
    run = tmp_path / "run"
    shutil.copytree(pretrained.folder("zh-en-numbers"), run)
    saved = datetime.fromtimestamp((run / "config.json").stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    _refused(
        capsys,
        [*TINY, "--out", str(run)],
        f"{run} already holds an attnlab `train seq2seq` run (saved {saved}); pass --resume to continue it or "
        "--overwrite to replace it, or choose another --out",
    )
    config = json.loads((run / "config.json").read_text())
    config["data"] = [1]
    (run / "config.json").write_text(json.dumps(config))
    _refused(
        capsys,
        ["train", "seq2seq", "--out", str(run), "--resume"],
        f"{run}/config.json: 'data' must be an object; got list",
    )
    del config["data"]
    (run / "config.json").write_text(json.dumps(config))
    _refused(
        capsys,
        ["train", "seq2seq", "--out", str(run), "--resume"],
        f"{run} is not a seq2seq training checkpoint",
    )
    assert fitted == {}


def test_config_field_names_become_flag_names_in_messages():
    assert _flag_names("num_heads must divide dim; got num_heads=3, dim=8, ffn_dim=4") == (
        "--num-heads must divide dim; got --num-heads=3, --dim=8, --ff=4"
    )
    assert _flag_names("emb_dim must be >= 1; n=0, luong_score=x, decoder must") == (
        "--emb must be >= 1; --numbers=0, --score=x, --attention must"
    )
    assert _flag_names("num_encoder_layers must be >= 1") == "--num-layers must be >= 1"
    # whole names only: attn_dim has no other spelling, x-dim and my_dim are other names
    assert _flag_names("attn_dim must; x-dim=1; my_dim=2") == "attn_dim must; x-dim=1; my_dim=2"
