"""The command line's shared option machinery: the ``type=`` conversions (what each accepts, its exact
refusal, the ends of its range), token spans, old flag spellings (hidden, noted once on stderr, parsed
as the new flag), ``--checkpoint`` / ``--pretrained`` as one source, and verbs grouped into tasks."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pytest

import attnlab
from attnlab.cli import Parser
from attnlab.cli._deprecated import OLD_SPELLINGS, deprecated_alias
from attnlab.cli._group import add_group
from attnlab.cli._source import add_model_source, pretrained_folder
from attnlab.cli._types import Span, fraction, int_list, positive_int, positive_int_list, token_span

Refused = argparse.ArgumentTypeError


def refusal(convert, text: str) -> str:
    with pytest.raises(Refused) as e:
        convert(text)
    return str(e.value)


def test_positive_int():
    assert (positive_int("1"), positive_int(" 12 "), positive_int("+3")) == (1, 12, 3)
    assert type(positive_int("7")) is int
    assert refusal(positive_int, "0") == "expected an integer >= 1; got 0"
    assert refusal(positive_int, "-5") == "expected an integer >= 1; got -5"
    assert refusal(positive_int, "2.5") == "expected an integer; got '2.5'"
    assert refusal(positive_int, "ten") == "expected an integer; got 'ten'"


def test_fraction_is_in_zero_one_with_one_included():
    assert (fraction("1"), fraction("0.25"), fraction("1e-9")) == (1.0, 0.25, 1e-9)
    assert type(fraction("1")) is float
    assert refusal(fraction, "0") == "expected a weight in (0, 1]; got 0.0"
    assert refusal(fraction, "1.0001") == "expected a weight in (0, 1]; got 1.0001"
    assert refusal(fraction, "-0.5") == "expected a weight in (0, 1]; got -0.5"
    assert refusal(fraction, "nan") == "expected a weight in (0, 1]; got nan"
    assert refusal(fraction, "half") == "expected a number; got 'half'"


def test_int_list():
    assert int_list("4,16,64") == (4, 16, 64)
    assert int_list(" 1 , 2,,3, ") == (1, 2, 3)  # blanks and empty items are skipped
    assert int_list("-2,0") == (-2, 0)
    assert refusal(int_list, "1,two") == "expected comma-separated integers; got '1,two'"
    assert refusal(int_list, "1.5") == "expected comma-separated integers; got '1.5'"
    assert refusal(int_list, "") == "expected at least one integer; got ''"
    assert refusal(int_list, " , ") == "expected at least one integer; got ' , '"


def test_positive_int_list():
    assert positive_int_list("1") == (1,)
    assert positive_int_list("16,32,48") == (16, 32, 48)
    assert refusal(positive_int_list, "8,0") == "every value must be >= 1; got '8,0'"
    assert refusal(positive_int_list, "-1,4") == "every value must be >= 1; got '-1,4'"
    assert refusal(positive_int_list, "x") == "expected comma-separated integers; got 'x'"


def test_token_span_reads_a_to_b():
    assert token_span("2:5") == Span(2, 5)
    assert token_span(":5") == Span(None, 5)
    assert token_span("3:") == Span(3, None)
    assert token_span("-64:") == Span(-64, None)
    assert token_span(":") == Span(None, None)
    assert token_span(" 2 : -1 ") == Span(2, -1)
    expected = "expected A:B, tokens A to B counted from 1 (-1 is the last; -64: the last 64); got "
    for bad in ("5", "0:3", "1:0", "a:b", "1:2:3", "1.5:2", ""):
        assert refusal(token_span, bad) == expected + repr(bad), bad


def test_a_span_is_written_as_it_is_read():
    assert [str(Span(2, 5)), str(Span(None, 5)), str(Span(-64, None)), str(Span(None, None))] == [
        "2:5",
        ":5",
        "-64:",
        ":",
    ]


@pytest.mark.parametrize(
    "span, n, expected",
    [
        (Span(None, None), 10, (0, 10)),  # every token
        (Span(1, 1), 10, (0, 1)),  # the first, counted from 1, both ends included
        (Span(2, 5), 10, (1, 5)),  # tokens 2..5 = tokens[1:5]
        (Span(3, 30), 10, (2, 10)),  # clipped to the tokens there are
        (Span(-1, None), 10, (9, 10)),  # the last
        (Span(-3, None), 10, (7, 10)),  # the last three
        (Span(-64, None), 10, (0, 10)),  # more than there are: all
        (Span(None, -1), 10, (0, 10)),  # up to the last, included
        (Span(None, -2), 10, (0, 9)),  # all but the last
        (Span(-4, -2), 10, (6, 9)),
        (Span(None, -10), 10, (0, 1)),  # up to the tenth from the end: the first
        (Span(10, 10), 10, (9, 10)),  # the last, counted from the front
    ],
)
def test_a_span_selects_these_tokens(span, n, expected):
    assert span.indices(n) == expected


@pytest.mark.parametrize(
    "span, n", [(Span(11, None), 10), (Span(5, 4), 10), (Span(None, -11), 10), (Span(1, 1), 0)]
)
def test_a_span_that_selects_nothing_is_refused(span, n):
    with pytest.raises(ValueError) as e:
        span.indices(n)
    assert str(e.value) == f"--tokens {span} selects no token of the {n}"


def test_the_old_spellings_are_these():
    assert OLD_SPELLINGS == {
        "--layers": "--num-layers",
        "--heads": "--num-heads",
        "--pos": "--positional",
        "--d-model": "--dim",
        "--plot": "--picture",
        "--prompt": "--text",
        "--output": "--out",
        "--run": "--checkpoint",
        "--dtype": "--precision",
    }


def demo_parser() -> argparse.ArgumentParser:
    p = Parser(prog="attnlab demo")
    p.add_argument("--num-layers", type=positive_int, default=2, help="layers")
    g = p.add_argument_group("model")
    g.add_argument(
        "--positional", choices=("sinusoidal", "rope"), default="sinusoidal", help="positions"
    )
    g.add_argument("--quick", action="store_true", help="small")
    p.add_argument("--widths", type=int_list, nargs="+", default=None, metavar="W", help="widths")
    p.add_argument("--numbers", "--count", type=int, default=100, help="how many")
    p.add_argument(
        "--focus", type=int, nargs="?", const=1, default=None, help="a token, or the first"
    )
    deprecated_alias(p, "--layers", "--num-layers")
    deprecated_alias(p, "--n", "--count")
    deprecated_alias(p, "--query", "--focus")
    deprecated_alias(g, "--pos", "--positional")
    deprecated_alias(g, "--fast", "--quick")
    deprecated_alias(p, "--width", "--widths")
    return p


def test_an_old_spelling_parses_as_the_new_flag_with_a_note(capsys):
    p = demo_parser()
    argv = [
        "--layers",
        "3",
        "--pos",
        "rope",
        "--fast",
        "--width",
        "1,2",
        "3",
        "--n",
        "7",
        "--query",
    ]
    args = p.parse_args(argv)
    assert vars(args) == {
        "num_layers": 3,
        "positional": "rope",
        "quick": True,
        "widths": [(1, 2), (3,)],
        "numbers": 7,
        "focus": 1,
    }
    assert capsys.readouterr().err == (
        "attnlab demo: note: --layers is deprecated; use --num-layers\n"
        "attnlab demo: note: --pos is deprecated; use --positional\n"
        "attnlab demo: note: --fast is deprecated; use --quick\n"
        "attnlab demo: note: --width is deprecated; use --widths\n"
        "attnlab demo: note: --n is deprecated; use --numbers\n"  # the flag's first spelling
        "attnlab demo: note: --query is deprecated; use --focus\n"
    )
    assert p.parse_args(["--query", "4"]).focus == 4


def test_an_unused_old_spelling_leaves_the_default_and_says_nothing(capsys):
    args = demo_parser().parse_args([])
    assert vars(args) == {
        "num_layers": 2,
        "positional": "sinusoidal",
        "quick": False,
        "widths": None,
        "numbers": 100,
        "focus": None,
    }
    assert capsys.readouterr().err == ""


def test_an_old_spelling_is_checked_as_the_new_flag(capsys):
    with pytest.raises(SystemExit) as e:
        demo_parser().parse_args(["--layers", "0"])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        "attnlab demo: error: argument --layers: expected an integer >= 1; got 0 (see attnlab demo --help)\n"
    )
    with pytest.raises(SystemExit) as e:
        demo_parser().parse_args(["--pos", "alibi"])
    assert e.value.code == 2
    err = capsys.readouterr().err  # how the choices are quoted depends on Python's version
    assert err.startswith(
        "attnlab demo: error: argument --pos: invalid choice: 'alibi' (choose from "
    )
    assert "sinusoidal" in err and "rope" in err and "note:" not in err


def test_an_old_spelling_is_hidden_from_help():
    text = demo_parser().format_help()
    assert "--num-layers" in text and "--positional" in text and "--quick" in text
    for old in ("--layers", "--pos ", "--pos,", "--fast", "--width ", "--n ", "--query"):
        assert old not in text, old


def test_an_old_spelling_of_a_flag_not_added_is_a_bug():
    with pytest.raises(KeyError):
        deprecated_alias(Parser(prog="x"), "--old", "--new")


def test_pretrained_names_a_shipped_model_folder():
    shipped = Path(attnlab.__file__).parent / "pretrained"
    path = Path(pretrained_folder("de-en"))
    assert (
        path.is_dir()
        and path.parent == shipped
        and path.name == "de-en"
        and (path / "config.json").is_file()
    )
    with pytest.raises(Refused) as e:
        pretrained_folder("nope")
    assert (
        str(e.value)
        == "no pretrained model 'nope'; the shipped models are de-en, zh-en-numbers, char-gpt, caption"
    )


def test_checkpoint_or_pretrained_one_of_them(capsys):
    p = Parser(prog="attnlab demo")
    add_model_source(p, "a translator folder")
    assert p.parse_args(["--checkpoint", "runs/x"]).checkpoint == "runs/x"
    assert p.parse_args(["--pretrained", "de-en"]).checkpoint == pretrained_folder("de-en")
    for argv, message in [
        ([], "one of the arguments --checkpoint --pretrained is required"),
        (
            ["--checkpoint", "a", "--pretrained", "de-en"],
            "argument --pretrained: not allowed with argument --checkpoint",
        ),
    ]:
        with pytest.raises(SystemExit):
            p.parse_args(argv)
        assert (
            capsys.readouterr().err == f"attnlab demo: error: {message} (see attnlab demo --help)\n"
        )
    text = " ".join(p.format_help().split())
    assert "(--checkpoint DIR | --pretrained NAME)" in text
    assert "--checkpoint DIR a translator folder" in text
    assert (
        "--pretrained NAME a trained model that ships with attnlab instead (attnlab pretrained list)"
        in text
    )


def test_a_source_of_another_flag_optional_or_in_a_group():
    p = Parser(prog="attnlab demo")
    add_model_source(
        p, "a run", flag="--run", dest="run", required=False, pretrained="a shipped run"
    )
    assert p.parse_args([]).run is None
    assert p.parse_args(["--run", "r"]).run == "r"
    text = " ".join(p.format_help().split())
    assert "[--run DIR | --pretrained NAME]" in text and "--pretrained NAME a shipped run" in text
    q = Parser(prog="attnlab demo")
    group = q.add_mutually_exclusive_group(required=True)
    group.add_argument("--json")
    add_model_source(q, "a folder", group=group)
    assert "(--json JSON | --checkpoint DIR | --pretrained NAME)" in q.format_usage()


def test_a_group_lists_its_tasks_and_needs_one(capsys):
    p = Parser(prog="attnlab")
    sub = p.add_subparsers(dest="verb")
    from attnlab.cli import train_lm

    add_group(sub, "train", [train_lm], "train a model")  # the task modules the group's own module imported
    train = sub.choices["train"]
    assert train.description == "train a model"
    inner = [a for a in train._actions if isinstance(a, argparse._SubParsersAction)][0]
    assert (list(inner.choices), inner.dest, inner.metavar, inner.required) == (
        ["lm"],
        "train_task",
        "TASK",
        True,
    )
    with pytest.raises(SystemExit):
        p.parse_args(["train"])
    assert (
        capsys.readouterr().err
        == "attnlab train: error: the following arguments are required: TASK (see attnlab train --help)\n"
    )


def test_a_task_whose_module_fails_to_import_is_not_hidden(monkeypatch):
    real = importlib.import_module

    def broken(name, *a):
        if name == "attnlab.cli.train_lm":
            raise ModuleNotFoundError("No module named 'torchvision'", name="torchvision")
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", broken)
    from attnlab.cli import train

    sub = Parser(prog="attnlab").add_subparsers(dest="verb")
    with pytest.raises(ModuleNotFoundError):
        train.add_parser(sub, "train a model")
