"""One flag vocabulary across the verbs: --num-layers, --num-heads, --dim, --positional, --out (-o), --picture,
--text (the input text), --checkpoint, --device and --precision (every verb that runs a model), --lang (the
walkthrough's language only); every visible option says what it is. The old spellings parse to the same value for
one release, with one note on stderr, and are hidden from help."""

from __future__ import annotations

import argparse

import pytest
from cli_parsers import every_parser

from attnlab.cli import build_parser

CANONICAL = ["--num-layers", "3", "--num-heads", "2", "--dim", "16", "--out", "runs/x"]
# per train verb: its canonical flags, the namespace values they give, and the old spelling of each
TRAIN = {
    "seq2seq": ([*CANONICAL, "--positional", "rope"],
                {"num_layers": 3, "num_heads": 2, "dim": 16, "positional": "rope", "out": "runs/x"},
                {"--num-layers": "--layers", "--num-heads": "--heads", "--positional": "--pos"}),
    "lm": ([*CANONICAL, "--positional", "rope"],
           {"num_layers": 3, "num_heads": 2, "dim": 16, "positional": "rope", "out": "runs/x"}, {}),
    "caption": (CANONICAL, {"layers": 3, "num_heads": 2, "d_model": 16, "out": "runs/x"},
                {"--num-layers": "--layers", "--num-heads": "--heads", "--dim": "--d-model"}),
}
# spellings of the canonical flags that no verb may show (written here, not taken from attnlab)
SYNONYMS = {"--layers", "--n-layers", "--nlayers", "--heads", "--n-heads", "--nheads", "--pos", "--pos-encoding",
            "--d-model", "--width", "--plot", "--png", "--out-dir", "--prompt", "--output", "--run", "--dtype"}


def _parse(task: str, argv: list[str]) -> argparse.Namespace:
    return build_parser(only="train").parse_args(["train", task, *argv])


@pytest.mark.parametrize("task", sorted(TRAIN))
def test_every_train_verb_takes_the_canonical_spellings(task, capsys):
    argv, want, _ = TRAIN[task]
    args = _parse(task, argv)
    assert {k: getattr(args, k) for k in want} == want
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("task", sorted(TRAIN))
def test_every_train_verb_takes_the_flags_of_the_one_loop(task, capsys):
    argv = ["--out", "runs/x", "--max-seconds", "2.5", "--on-nonfinite", "skip", "--resume", "--device", "cpu",
            "--precision", "bf16", "--tensorboard"]
    args = _parse(task, argv)
    assert (args.max_seconds, args.on_nonfinite, args.resume, args.device, args.precision, args.tensorboard) == (
        2.5, "skip", True, "cpu", "bf16", True)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("task", sorted(TRAIN))
def test_every_train_verb_requires_out(task, capsys):
    argv, _, _ = TRAIN[task]
    i = argv.index("--out")
    with pytest.raises(SystemExit) as e:
        _parse(task, argv[:i] + argv[i + 2:])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("task, new, old", [(t, n, o) for t in sorted(TRAIN) for n, o in TRAIN[t][2].items()])
def test_an_old_spelling_gives_the_same_value_and_one_note(task, new, old, capsys):
    argv, _, _ = TRAIN[task]
    i = argv.index(new)
    canonical = _parse(task, argv)
    capsys.readouterr()
    args = _parse(task, [*argv[:i], old, argv[i + 1], *argv[i + 2:]])
    assert vars(args).keys() == vars(canonical).keys()
    assert {k: v for k, v in vars(args).items() if k != "func"} == {k: v for k, v in vars(canonical).items() if k != "func"}
    assert capsys.readouterr().err == f"attnlab train {task}: note: {old} is deprecated; use {new}\n"


@pytest.mark.parametrize("verb", ["translate", "interpret"])
def test_plot_is_an_old_spelling_of_picture(verb, capsys):
    lead = [verb, "hallo" if verb == "translate" else "heads", "--checkpoint", "r"]
    args = build_parser(only=verb).parse_args([*lead, "--plot", "a.png"])
    assert args.picture == "a.png" and not hasattr(args, "plot")
    assert capsys.readouterr().err == f"attnlab {verb}: note: --plot is deprecated; use --picture\n"


def test_an_old_spelling_is_checked_as_the_new_one(capsys):
    with pytest.raises(SystemExit) as e:
        _parse("seq2seq", ["--pos", "alibi", "--out", "never"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "alibi" in err and "Traceback" not in err


def test_no_verb_shows_a_synonym_of_a_canonical_flag():
    seen = 0
    for name, parser in every_parser(build_parser()):
        usage, listed = parser.format_usage(), parser.format_help().split("options:", 1)[-1]
        for action in parser._actions:
            shown = action.help is not argparse.SUPPRESS
            for flag in action.option_strings:
                if flag in SYNONYMS:
                    assert not shown, f"{name} shows {flag}"
                    assert f"{flag} " not in usage and f"{flag} " not in listed.replace(f"use {flag}", ""), name
            seen += bool(action.option_strings)
    assert seen > 100  # every verb was walked, not only the top level


def test_the_old_spellings_are_hidden_but_accepted_where_they_were():
    hidden = {}
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            for flag in action.option_strings:
                if flag in SYNONYMS:
                    hidden.setdefault(name, set()).add(flag)
    assert hidden == {"attnlab train seq2seq": {"--layers", "--heads", "--pos"},
                      "attnlab train caption": {"--layers", "--heads", "--d-model"},
                      "attnlab translate": {"--plot"}, "attnlab interpret": {"--plot", "--run"},
                      "attnlab generate": {"--prompt"}, "attnlab view": {"--output"}, "attnlab plot-run": {"--output"},
                      "attnlab check": {"--dtype"}, "attnlab experiment faithfulness": {"--run"}}


# verb words, the arguments it needs besides the flag, the old spelling, the new one and the value
RENAMED = [
    (["generate"], ["--checkpoint", "r"], "--prompt", "--text", "ROMEO:"),
    (["view"], ["--example", "e"], "--output", "--out", "p.html"),
    (["plot-run", "r"], [], "--output", "--out", "c.png"),
    (["interpret", "heads"], [], "--run", "--checkpoint", "runs/tf"),
    (["check", "m:f"], [], "--dtype", "--precision", "float16"),
    (["caption"], ["--checkpoint", "r"], "--lang", "--caption-lang", "fr"),
    (["train", "caption"], ["--out", "o"], "--lang", "--caption-lang", "de"),
    (["experiment", "faithfulness"], [], "--run", "--checkpoint", "runs/de-en"),
]


@pytest.mark.parametrize("words, rest, old, new, value", RENAMED, ids=[f"{r[0][0]} {r[2]}" for r in RENAMED])
def test_a_renamed_flag_keeps_its_old_spelling_for_one_release(words, rest, old, new, value, capsys):
    parser = build_parser(only=words[0])
    canonical = parser.parse_args([*words, *rest, new, value])
    assert capsys.readouterr().err == ""
    args = parser.parse_args([*words, *rest, old, value])
    assert {k: v for k, v in vars(args).items() if k != "func"} == {
        k: v for k, v in vars(canonical).items() if k != "func"}
    prog = " ".join(["attnlab", *words[:2 if words[0] in ("train", "experiment") else 1]])
    assert capsys.readouterr().err == f"{prog}: note: {old} is deprecated; use {new}\n"


def _visible(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions if a.help is not argparse.SUPPRESS for flag in a.option_strings}


def test_every_visible_option_of_every_command_says_what_it_is():
    bare = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, parser in every_parser(build_parser())
            for a in parser._actions if a.help is not argparse.SUPPRESS and not a.help
            and not isinstance(a, argparse._SubParsersAction)]
    assert bare == []


def test_o_is_out_and_lang_is_the_walkthroughs_language_everywhere():
    short_o, lang = [], []
    for name, parser in every_parser(build_parser()):
        shown = _visible(parser)
        if "-o" in shown:
            assert shown["-o"].option_strings == ["-o", "--out"], name
            short_o.append(name)
        if "--lang" in shown:
            assert tuple(shown["--lang"].choices) == ("en", "zh") and "walkthrough" in shown["--lang"].help, name
            lang.append(name)
    assert short_o == ["attnlab view", "attnlab plot-run"]
    assert lang == ["attnlab explain", "attnlab verify"]


def test_the_input_text_the_checkpoint_and_the_device_are_spelled_one_way():
    parsers = dict(every_parser(build_parser()))
    for verb in ("explain", "view", "translate", "generate", "interpret"):
        assert "--text" in _visible(parsers[f"attnlab {verb}"]), verb
    with_model = [name for name, p in parsers.items() if "--pretrained" in _visible(p)]
    assert sorted(with_model) == sorted(f"attnlab {v}" for v in (
        "explain", "view", "translate", "evaluate", "generate", "caption", "interpret"))
    for name in with_model:
        shown = _visible(parsers[name])
        assert {"--checkpoint", "--device", "--precision"} <= set(shown), name
        assert tuple(shown["--precision"].choices) == ("fp32", "bf16"), name


def test_translate_takes_its_text_as_a_flag_or_as_the_last_words(capsys):
    from attnlab.cli import main

    parser = build_parser(only="translate")
    args = parser.parse_args(["translate", "--checkpoint", "r", "--text", "eins", "--text", "zwei", "drei"])
    assert (args.text, args.texts) == (["eins", "zwei"], ["drei"])
    assert main(["translate", "--pretrained", "de-en"]) == 2
    assert capsys.readouterr().err == ("attnlab translate: error: give the sentence to translate: --text TEXT "
                                       "(or TEXT after the options)\n")
