"""``attnlab interpret``: the whole matrix as printed (column width, labels cut to 6, whitespace made
visible), how --head-fusion / --no-residual reach rollout and flow, the picture's title, labels and
annotation, ``heads`` on the shipped GPT (its text windows and loss checked against a cross-entropy computed
here; the importance table and the ablation lines formatted from recorded values; the plot's labels and
title), and every refusal as one exact line, exit 2."""

from __future__ import annotations

import importlib
import json

import pytest
import torch
import torch.nn.functional as F

import attnlab.cli.interpret as cli
import attnlab.interpret as interpret
from attnlab import pretrained
from attnlab.cli import UsageError, main

pytestmark = pytest.mark.usefixtures("one_thread")
heatmap_module = importlib.import_module("attnlab.viz.heatmap")

IDENTITY3 = [[[[1, 0, 0], [0, 1, 0], [0, 0, 1]]]]  # 1 layer, 1 head, 3 tokens


def _json(tmp_path, tokens, layers, name="w.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"tokens": tokens, "layers": layers}))
    return str(path)


def test_the_whole_matrix_is_printed_in_columns(tmp_path, capsys):
    path = _json(tmp_path, ["a", "longtoken", ""], IDENTITY3)
    assert main(["interpret", "rollout", "--json", path, "--no-residual"]) == 0
    # column width: the longest label (9); each column 6 wide, labels cut to 6; the empty token is ∅
    assert capsys.readouterr().out.splitlines() == [
        "               a longto      ∅",
        "        a  1.000  0.000  0.000",
        "longtoken  0.000  1.000  0.000",
        "        ∅  0.000  0.000  1.000",
    ]
    path = _json(tmp_path, [" ", "\t", "x"], IDENTITY3)
    assert main(["interpret", "flow", "--json", path, "--no-residual"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [  # at least 6 wide; ␣ and \t for whitespace
        "            ␣     \\t      x",
        "     ␣  1.000  0.000  0.000",
    ]


@pytest.mark.parametrize("method", ["rollout", "flow"])
def test_the_flags_reach_the_method_and_the_picture(tmp_path, monkeypatch, capsys, method):
    seen = {}

    def fake(w, residual, head_fusion):
        seen.update(shape=w.shape, residual=residual, head_fusion=head_fusion)
        return [[1.0, 0.0], [0.0, 1.0]]

    monkeypatch.setattr(interpret, method, fake)
    monkeypatch.setattr(
        cli,
        "draw",
        lambda m, labels, path, title: seen.update(labels=labels, path=path, title=title),
    )
    path = _json(tmp_path, ["a", "b", "c"], [IDENTITY3[0]] * 2)
    assert (
        main(
            [
                "interpret",
                method,
                "--json",
                path,
                "--tokens",
                "2:3",
                "--head-fusion",
                "max",
                "--no-residual",
                "--picture",
                "p.png",
            ]
        )
        == 0
    )
    assert (seen["shape"], seen["residual"], seen["head_fusion"]) == ((2, 1, 2, 2), False, "max")
    assert (seen["labels"], seen["path"]) == (["b", "c"], "p.png")
    assert seen["title"] == f"attention {method} (tokens 2–3, 2 layers, heads: max, no residual)"
    assert capsys.readouterr().out.splitlines()[-1] == "wrote p.png"
    assert main(["interpret", method, "--json", path, "--picture", "q.png"]) == 0
    assert (seen["residual"], seen["head_fusion"]) == (True, "mean")
    assert seen["title"] == f"attention {method} (2 layers, heads: mean)"
    assert main(["interpret", method, "--json", path, "--last", "1", "--picture", "q.png"]) == 0
    assert seen["title"] == f"attention {method} (tokens 3–3, 2 layers, heads: mean)"


@pytest.mark.parametrize("n, annotate", [(12, True), (13, False)])
def test_the_picture_is_a_labelled_heatmap_annotated_up_to_12_tokens(monkeypatch, n, annotate):
    seen = {}
    monkeypatch.setattr(
        heatmap_module, "heatmap", lambda m, x, y, **kw: seen.update(x=x, y=y, **kw) or "FIG"
    )
    monkeypatch.setattr(cli, "save_figure", lambda fig, path: seen.update(fig=fig, path=path))
    labels = [str(i) for i in range(n)]
    cli.draw([[0.0] * n] * n, labels, "p.png", "T")
    assert seen == {
        "x": labels,
        "y": labels,
        "title": "T",
        "annotate": annotate,
        "xlabel": "input token",
        "ylabel": "output token (last layer)",
        "fig": "FIG",
        "path": "p.png",
    }


def _refused(capsys, argv, message):
    assert main(["interpret", *argv]) == 2
    assert capsys.readouterr().err == f"attnlab interpret: error: {message}\n"


def test_json_refusals(tmp_path, capsys):
    _refused(
        capsys, ["rollout"], "interpret rollout needs --json FILE (the viewer's attention JSON) or --hf MODEL_DIR --text T"
    )
    _refused(capsys, ["flow"], "interpret flow needs --json FILE (the viewer's attention JSON) or --hf MODEL_DIR --text T")
    good = _json(tmp_path, ["a", "b", "c"], IDENTITY3)
    _refused(
        capsys,
        ["rollout", "--json", good, "--picture", "x.jpg"],
        "--picture must be a .png file; got 'x.jpg'",
    )
    missing = str(tmp_path / "none.json")
    _refused(capsys, ["rollout", "--json", missing], f"no such file: {missing}")
    bad = tmp_path / "bad.json"
    bad.write_text("nope")
    _refused(
        capsys,
        ["rollout", "--json", str(bad)],
        f"{bad} is not JSON: Expecting value: line 1 column 1 (char 0)",
    )
    for content in ("[1]", '{"tokens": "ab", "layers": []}', '{"tokens": []}'):
        bad.write_text(content)
        _refused(
            capsys,
            ["rollout", "--json", str(bad)],
            f'{bad} must be an object {{"tokens": [...], "layers": layers × heads × q × k}}',
        )
    bad.write_text('{"tokens": ["a"], "layers": [[[[1]], [[1, 2]]]]}')
    _refused(
        capsys,
        ["rollout", "--json", str(bad)],
        f'{bad}: "layers" must be a regular layers × heads × q × k array of numbers',
    )
    for layers, shape in (([[[[1, 0]]]], "(1, 1, 1, 2)"), ([[[1, 0], [0, 1]]], "(1, 2, 2)")):
        path = _json(tmp_path, ["a", "b"], layers)
        _refused(
            capsys,
            ["rollout", "--json", path],
            f'{path}: "layers" must be layers × heads × 2 × 2 for 2 tokens; got shape {shape}',
        )
    for layers in ([[[[-0.5]]]], [[[[float("inf")]]]]):
        path = _json(tmp_path, ["a"], layers)
        _refused(
            capsys,
            ["rollout", "--json", path],
            f"{path}: attention weights must be finite and >= 0",
        )
    assert (
        main(["interpret", "rollout", "--json", _json(tmp_path, ["a"], [[[[0.0]]]])]) == 0
    )  # zero is allowed


def test_flow_refuses_more_than_64_tokens(tmp_path, capsys):
    for n, code in ((64, 0), (65, 2)):
        path = _json(
            tmp_path, ["t"] * n, [[[[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]]]
        )
        assert main(["interpret", "flow", "--json", path, "--no-residual"]) == code
    assert capsys.readouterr().err == (
        "attnlab interpret: error: flow runs n² max-flow problems and is slow beyond 64 tokens; this input has 65: "
        "use rollout, or crop it (--last 64 keeps the last 64; --tokens A:B any span)\n"
    )


@pytest.fixture
def recorded_heads(monkeypatch):
    seen = {}

    def importance(model, loss):
        seen.update(model=model, loss=loss)
        return torch.tensor([[0.5, 0.25, 0.125, 0.0625]] * 4)

    def curve(model, importance, loss):
        seen["importance"] = importance
        return [(2, 0), (1, 3)], [1.5, 2.25, 3.125]

    monkeypatch.setattr(interpret, "head_importance", importance)
    monkeypatch.setattr(interpret, "ablation_curve", curve)
    monkeypatch.setattr(
        interpret,
        "plot_ablation",
        lambda losses, path, labels, title: seen.update(plot=(losses, path, labels, title)),
    )
    return seen


def test_heads_on_the_shipped_gpt(tmp_path, recorded_heads, capsys):
    text = tmp_path / "t.txt"
    text.write_text(
        "To be, or not to be, that is the question:\n" * 10, encoding="utf-8"
    )  # 440 characters
    assert (
        main(
            [
                "interpret",
                "heads",
                "--pretrained",
                "char-gpt",
                "--text",
                str(text),
                "--limit",
                "2",
                "--picture",
                "a.png",
            ]
        )
        == 0
    )
    what = f"2 windows of 128 characters of {text}"
    module = [
        f"blocks.{i}.self_attn".ljust(40) + "   0.5000   0.2500   0.1250   0.0625" for i in range(4)
    ]
    assert capsys.readouterr().out.splitlines() == [
        f"head importance |dL/d gate| (Michel et al. 2019), loss on {what}; heads counted from 1",
        "module".ljust(40) + "       h1       h2       h3       h4",
        *module,
        "",
        "loss with heads removed, least important first (all heads: 1.5000)",
        "removed  head                                         loss",
        "      1  blocks.2.self_attn h1                        2.2500",
        "      2  blocks.1.self_attn h4                        3.1250",
        "wrote a.png",
    ]
    assert recorded_heads["plot"] == (
        [1.5, 2.25, 3.125],
        "a.png",
        ["3.1", "2.4"],
        f"head ablation, gpt (4 attention modules × 4 heads), loss on {what}",
    )
    # the loss: the mean next-character cross-entropy over windows 0-127 and 128-255 (the third, 256-383, is
    # past --limit 2), each predicting the characters one further on
    loaded = pretrained.load("char-gpt")
    ids = torch.tensor(loaded.vocabs["vocab"].encode(text.read_text()))
    x = torch.stack([ids[0:128], ids[128:256]])
    y = torch.stack([ids[1:129], ids[129:257]])
    with torch.no_grad():
        expected = F.cross_entropy(loaded.model(x).flatten(0, 1), y.flatten())
        got = recorded_heads["loss"](recorded_heads["model"])
    assert float(got) == pytest.approx(float(expected), rel=1e-6)


def test_heads_windows_are_as_long_as_a_short_text_allows(tmp_path, recorded_heads, capsys):
    text = tmp_path / "t.txt"
    text.write_text("abcdefghij", encoding="utf-8")
    assert main(["interpret", "heads", "--pretrained", "char-gpt", "--text", str(text)]) == 0
    assert (
        f"loss on 1 windows of 9 characters of {text};" in capsys.readouterr().out.splitlines()[0]
    )
    text.write_text("a", encoding="utf-8")
    _refused(
        capsys,
        ["heads", "--pretrained", "char-gpt", "--text", str(text)],
        f"{text} needs at least 2 characters; got 1",
    )


def test_heads_refusals(tmp_path, recorded_heads, capsys):
    _refused(
        capsys,
        ["heads"],
        "interpret heads needs --checkpoint DIR (a Transformer translator or GPT checkpoint) or "
        "--pretrained NAME",
    )
    _refused(
        capsys,
        ["heads", "--pretrained", "char-gpt", "--picture", "a.svg"],
        "--picture must be a .png file; got 'a.svg'",
    )
    missing = tmp_path / "none.txt"
    _refused(
        capsys,
        ["heads", "--pretrained", "char-gpt", "--text", str(missing)],
        f"no such file: {missing}",
    )
    assert "model" not in recorded_heads


def test_a_gpt_run_without_its_text_needs_text(tmp_path):
    loaded = type(
        "Loaded",
        (),
        {"vocabs": {"vocab": None}, "config": {"data": {"name": "text", "path": "gone"}}},
    )
    args = type("Args", (), {"text": None})
    with pytest.raises(
        UsageError,
        match=r"^interpret heads on a GPT run needs --text FILE \(the text to measure "
        r"the loss on\): its checkpoint does not say where its training text is$",
    ):
        cli.gpt_text(args, loaded)


def test_a_translator_is_measured_on_its_split_not_a_text(monkeypatch):
    import attnlab.train.heldout as heldout

    loaded = type("Loaded", (), {"kind": "transformer"})
    args = type("Args", (), {"text": "t.txt", "split": "valid", "limit": 3, "data_path": None})
    with pytest.raises(
        UsageError,
        match="^--text is for GPT runs; a translator run is measured on its own --split$",
    ):
        cli.heads_loss(args, loaded)
    args.text = None
    monkeypatch.setattr(
        heldout,
        "translation_split",
        lambda loaded, split, path: (type("Ds", (), {"name": "numbers-de-en"}), []),
    )
    with pytest.raises(
        UsageError, match="^numbers-de-en has no valid sentences to measure the loss on$"
    ):
        cli.heads_loss(args, loaded)
