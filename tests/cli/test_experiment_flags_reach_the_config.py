"""``attnlab experiment NAME``, with the experiment itself replaced by a recorder: each flag reaches the
experiment's config (``--quick`` its quick size, otherwise the default size, ``--seed`` 0 by default), the
output folder and the progress switch (``--quiet``) reach the run, the table is printed, then the footer line
with its numbers formatted, and each bad flag is refused with one line."""

from __future__ import annotations

import importlib
import sys
import types
from dataclasses import replace

import pytest

import attnlab.experiments.vision as vision
from attnlab import pretrained
from attnlab.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def _recorder(monkeypatch, module: str, results: dict):
    mod = importlib.import_module(f"attnlab.experiments.{module}")
    seen = {}

    def fake_run(cfg, out, progress=None):
        seen.update(cfg=cfg, out=out, progress=progress)
        return results

    monkeypatch.setattr(mod, "run", fake_run)
    monkeypatch.setattr(mod, "table", lambda r: "TABLE\n" if r is results else "OTHER\n")
    return mod, seen


def test_distance(monkeypatch, capsys):
    mod, seen = _recorder(monkeypatch, "distance", {"seconds": 12.6})
    assert main(["experiment", "distance", "--quick", "--quiet"]) == 0
    assert seen == {"cfg": mod.DistanceConfig.quick(), "out": "runs/distance", "progress": None}
    assert capsys.readouterr().out == (
        "TABLE\n(smoke-run figures (--quick): too small to read anything into: test "
        f"accuracy % mean ± 95 % CI over {mod.DistanceConfig.quick().seeds} seeds; "
        "13 s; written to runs/distance)\n"
    )
    assert (
        main(
            [
                "experiment",
                "distance",
                "--distances",
                "2,8",
                "--seeds",
                "2",
                "--steps",
                "5",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert (
        seen["cfg"] == replace(mod.DistanceConfig(), distances=(2, 8), seeds=2, steps=5)
        and seen["out"] == "o"
    )
    assert capsys.readouterr().out.endswith(
        "(figures: test accuracy % mean ± 95 % CI over 2 seeds; 13 s; written to o)\n"
    )
    seen["progress"]("step 3")
    assert capsys.readouterr().err == "step 3\n"


def test_length(monkeypatch, capsys):
    mod, seen = _recorder(
        monkeypatch, "length", {"models": {"none": {"seconds": 1.4}, "bahdanau": {"seconds": 20.5}}}
    )
    assert main(["experiment", "length", "--quick"]) == 0
    assert seen == {
        "cfg": replace(mod.LengthConfig.quick(), seed=0),
        "out": "runs/length",
        "progress": True,
    }
    assert capsys.readouterr().out == (
        "TABLE\n(smoke-run figures (--quick): too small to read anything into; test "
        "split by source length; training + decoding: none 1 s, bahdanau 20 s; "
        "written to runs/length)\n"
    )
    assert (
        main(
            [
                "experiment",
                "length",
                "--steps",
                "3",
                "--resamples",
                "9",
                "--seed",
                "4",
                "--quiet",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert seen == {
        "cfg": replace(mod.LengthConfig(), steps=3, resamples=9, seed=4),
        "out": "o",
        "progress": False,
    }
    assert capsys.readouterr().out.endswith(
        "\n(test split by source length; training + decoding: none 1 s, "
        "bahdanau 20 s; written to o)\n"
    )


def test_rope_scaling(monkeypatch, capsys):
    mod, seen = _recorder(monkeypatch, "rope_scaling", {})
    clock = iter([100.0, 142.6])
    monkeypatch.setattr(sys.modules["time"], "perf_counter", lambda: next(clock))
    assert main(["experiment", "rope-scaling", "--quick"]) == 0
    assert seen == {
        "cfg": replace(mod.RopeScalingConfig.quick(), seed=0),
        "out": "runs/rope-scaling",
        "progress": True,
    }
    assert capsys.readouterr().out == (
        "TABLE\n(validation loss, nats per character; 43 s in all; written to runs/rope-scaling)\n"
    )
    clock = iter([0.0, 1.0])
    assert (
        main(
            [
                "experiment",
                "rope-scaling",
                "--steps",
                "1",
                "--factor",
                "1",
                "--methods",
                " rope, alibi ,",
                "--seed",
                "2",
                "--quiet",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert seen == {
        "cfg": replace(
            mod.RopeScalingConfig(), steps=1, factor=1.0, methods=("rope", "alibi"), seed=2
        ),
        "out": "o",
        "progress": False,
    }


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--steps", "0"], "--steps must be >= 1; got 0"),
        (["--factor", "0.5"], "--factor must be >= 1; got 0.5"),
        (
            ["--methods", "rope,rope"],
            "--methods takes distinct names from "
            "rope,linear,ntk,dynamic,yarn,llama3,longrope,alibi; got 'rope,rope'",
        ),
        (
            ["--methods", "rope,nope"],
            "--methods takes distinct names from "
            "rope,linear,ntk,dynamic,yarn,llama3,longrope,alibi; got 'rope,nope'",
        ),
        (
            ["--methods", " , "],
            "--methods takes distinct names from "
            "rope,linear,ntk,dynamic,yarn,llama3,longrope,alibi; got ' , '",
        ),
    ],
)
def test_rope_scaling_refusals(monkeypatch, capsys, flags, message):
    _, seen = _recorder(monkeypatch, "rope_scaling", {})
    assert main(["experiment", "rope-scaling", *flags]) == 2
    assert capsys.readouterr().err == f"attnlab experiment rope-scaling: error: {message}\n"
    assert seen == {}


def test_alignment(monkeypatch, capsys):
    mod, seen = _recorder(
        monkeypatch, "alignment", {"n_test": 40, "n_train": 900, "wall_seconds": 7.5}
    )
    assert main(["experiment", "alignment", "--quick"]) == 0
    assert seen == {
        "cfg": replace(mod.AlignmentConfig.quick(), seed=0),
        "out": "runs/alignment",
        "progress": True,
    }
    assert capsys.readouterr().out == (
        "TABLE\n(smoke-run figures (--quick): too small to read anything into; AER % "
        "on 40 held-out verses, lower is better; trained on 900; 8 s; "
        "written to runs/alignment)\n"
    )
    assert (
        main(
            [
                "experiment",
                "alignment",
                "--steps",
                "3",
                "--threshold",
                "0.5",
                "--source-form",
                "text",
                "--seed",
                "1",
                "--quiet",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert seen == {
        "cfg": replace(mod.AlignmentConfig(), steps=3, threshold=0.5, source_form="text", seed=1),
        "out": "o",
        "progress": False,
    }
    assert capsys.readouterr().out.endswith(
        "\n(AER % on 40 held-out verses, lower is better; trained on 900; 8 s; written to o)\n"
    )


def test_bottleneck(monkeypatch, capsys):
    mod, seen = _recorder(
        monkeypatch, "bottleneck", {"models": {"none": {"seconds": 1.25}, "luong": {"seconds": 3}}}
    )
    assert main(["experiment", "bottleneck", "--quick"]) == 0
    assert seen == {
        "cfg": replace(mod.BottleneckConfig.quick(), seed=0),
        "out": "runs/bottleneck",
        "progress": True,
    }
    assert capsys.readouterr().out == (
        "TABLE\n(exact match % / chrF on the test split by source length; "
        "training+eval: none 1.2 s, luong 3.0 s; written to runs/bottleneck)\n"
    )
    assert (
        main(
            [
                "experiment",
                "bottleneck",
                "--data",
                "numbers-de-en",
                "--steps",
                "3",
                "--n",
                "50",
                "--seed",
                "5",
                "--models",
                "luong, transformer",
                "--quiet",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert seen == {
        "cfg": replace(
            mod.BottleneckConfig(),
            data="numbers-de-en",
            steps=3,
            n=50,
            seed=5,
            decoders=("luong", "transformer"),
        ),
        "out": "o",
        "progress": False,
    }


@pytest.mark.parametrize("models", ["none,none", "none,gpt", ",", ""])
def test_bottleneck_refuses_bad_models(monkeypatch, capsys, models):
    _, seen = _recorder(monkeypatch, "bottleneck", {})
    assert main(["experiment", "bottleneck", "--models", models]) == 2
    assert capsys.readouterr().err == (
        "attnlab experiment bottleneck: error: --models takes distinct names from "
        f"none,bahdanau,luong,transformer; got {models!r}\n"
    )
    assert seen == {}


def test_recommendation(monkeypatch, capsys):
    mod, seen = _recorder(monkeypatch, "recommendation", {"seconds": 59.5})
    assert main(["experiment", "recommendation", "--quick", "--quiet"]) == 0
    quick = mod.RecommendationConfig.quick()
    assert seen == {"cfg": quick, "out": "runs/recommendation", "progress": None}
    assert capsys.readouterr().out == (
        f"TABLE\n(smoke-run figures (--quick): small, read with care: held-out next item ranked among "
        f"{quick.eval_negatives} unseen items, mean ± 95 % CI over {quick.seeds} seeds; weight on the cause: "
        "attention on the history item that caused the held-out one; 60 s; written to runs/recommendation)\n"
    )
    assert main(["experiment", "recommendation", "--seeds", "2", "--steps", "7", "--out", "o"]) == 0
    assert seen["cfg"] == replace(mod.RecommendationConfig(), seeds=2, steps=7)
    assert capsys.readouterr().out.startswith(
        "TABLE\n(figures: held-out next item ranked among 100 unseen items, "
        "mean ± 95 % CI over 2 seeds;"
    )
    seen["progress"]("seed 1")
    assert capsys.readouterr().err == "seed 1\n"


def test_faithfulness_training(monkeypatch, capsys):
    mod, seen = _recorder(monkeypatch, "faithfulness", {"seconds": 3.5})
    assert main(["experiment", "faithfulness", "--quick", "--quiet"]) == 0
    assert seen == {
        "cfg": replace(mod.FaithfulnessConfig.quick(), seed=0),
        "out": "runs/faithfulness",
        "progress": None,
    }
    assert capsys.readouterr().out == (
        "TABLE\n(smoke-run figures (--quick): too small to read anything into; "
        "4 s; written to runs/faithfulness)\n"
    )
    assert (
        main(
            [
                "experiment",
                "faithfulness",
                "--data",
                "numbers-en-zh",
                "--steps",
                "2",
                "--test-size",
                "3",
                "--epsilon",
                "0.5",
                "--adv-steps",
                "4",
                "--seed",
                "6",
                "--out",
                "o",
            ]
        )
        == 0
    )
    assert seen["cfg"] == replace(
        mod.FaithfulnessConfig(),
        data="numbers-en-zh",
        steps=2,
        test_size=3,
        epsilon=0.5,
        adv_steps=4,
        seed=6,
    )
    assert capsys.readouterr().out == "TABLE\n(4 s; written to o)\n"
    seen["progress"]("model luong")
    assert capsys.readouterr().err == "model luong\n"


@pytest.mark.parametrize(
    "value, message",
    [
        ("x", "expected a number; got 'x'"),
        ("0", "expected a TVD budget in (0, 1); got 0.0"),
        ("1", "expected a TVD budget in (0, 1); got 1.0"),
    ],
)
def test_faithfulness_epsilon_is_a_budget_inside_zero_one(capsys, value, message):
    with pytest.raises(SystemExit) as exit:
        main(["experiment", "faithfulness", "--epsilon", value])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        f"attnlab experiment faithfulness: error: argument --epsilon: {message} "
        "(see attnlab experiment faithfulness --help)\n"
    )


def test_faithfulness_of_a_trained_run(monkeypatch, capsys, tmp_path):
    import attnlab.train.heldout as heldout

    mod = importlib.import_module("attnlab.experiments.faithfulness")
    calls = {}
    examples = [([5, 6], [7])] * 5

    def split(loaded, name, data_path):
        calls["split"] = (name, data_path)
        return types.SimpleNamespace(name="numbers-zh-en"), examples

    def measure(model, part, cfg):
        calls["measure"] = (model.config.decoder, len(part), cfg)
        return {"tvd": 0.1}

    monkeypatch.setattr(heldout, "translation_split", split)
    monkeypatch.setattr(mod, "measure", measure)
    monkeypatch.setattr(mod, "write", lambda r, out: calls.update(written=(r, out)))
    monkeypatch.setattr(mod, "table", lambda r: "TABLE\n")
    run = str(pretrained.folder("zh-en-numbers"))
    assert (
        main(
            [
                "experiment",
                "faithfulness",
                "--checkpoint",
                run,
                "--test-size",
                "3",
                "--data-path",
                "d.txt",
                "--quiet",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    assert calls["split"] == ("test", "d.txt")
    cfg = replace(
        mod.FaithfulnessConfig(), test_size=3, data="numbers-zh-en", decoders=("bahdanau",)
    )
    assert calls["measure"] == ("bahdanau", 3, cfg)
    results, out = calls["written"]
    assert out == str(tmp_path) and results["models"] == {"bahdanau": {"tvd": 0.1}}
    assert results["config"]["run"] == run and results["config"]["decoders"] == ("bahdanau",)
    assert 0 < results["seconds"] < 30  # the wall time of loading and measuring
    assert (
        capsys.readouterr().out == f"TABLE\n({results['seconds']:.0f} s; written to {tmp_path})\n"
    )


def test_faithfulness_refusals(monkeypatch, capsys):
    _, seen = _recorder(monkeypatch, "faithfulness", {"seconds": 1})
    run = str(pretrained.folder("zh-en-numbers"))
    for argv, message in (
        (["--data-path", "d.txt"], "--data-path goes with --checkpoint"),
        (
            ["--checkpoint", run, "--steps", "3"],
            "--data and --steps are for training; with --checkpoint the run's own data and "
            "weights are used",
        ),
        (
            ["--checkpoint", run, "--data", "numbers-de-en"],
            "--data and --steps are for training; with --checkpoint the run's own "
            "data and weights are used",
        ),
    ):
        assert main(["experiment", "faithfulness", *argv]) == 2
        assert capsys.readouterr().err == f"attnlab experiment faithfulness: error: {message}\n"
    assert seen == {}


def test_vision(monkeypatch, capsys):
    from attnlab.experiments.vision import VisionConfig

    seen = []
    result = types.SimpleNamespace(table=lambda: "TABLE", files=["a.png", "b.json"])
    monkeypatch.setattr(vision, "run", lambda cfg: seen.append(cfg) or result)
    assert main(["experiment", "vision", "--quick"]) == 0
    assert seen[-1] == replace(VisionConfig.quick(), out_dir="runs/vision")
    assert capsys.readouterr().out == (
        "\n(smoke-run figures from --quick: too small to read anything into)\nTABLE\n"
        "wrote a.png\nwrote b.json\n"
    )
    assert main(["experiment", "vision", "--full", "--out", "o"]) == 0
    assert seen[-1] == replace(VisionConfig.full(), out_dir="o")
    assert capsys.readouterr().out == "\nTABLE\nwrote a.png\nwrote b.json\n"
    assert (
        main(
            [
                "experiment",
                "vision",
                "--dataset",
                "fashion",
                "--data-root",
                "r",
                "--variants",
                "plain, cbam",
                "--seeds",
                "3,4",
                "--train-sizes",
                "10,20",
                "--epochs",
                "2",
                "--canvas",
                "30",
                "--clutter",
                "0",
                "--widths",
                "4,8",
                "--overlays",
                "0",
                "--out",
                "",
            ]
        )
        == 0
    )
    assert seen[-1] == replace(
        VisionConfig(),
        dataset="fashion",
        data_root="r",
        variants=("plain", "cbam"),
        seeds=(3, 4),
        train_sizes=(10, 20),
        epochs=2,
        canvas=30,
        clutter=0,
        widths=(4, 8),
        n_overlays=0,
        out_dir=None,
    )
