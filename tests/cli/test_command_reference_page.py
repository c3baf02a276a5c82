"""The command reference page ``docs/cli.md``: one section per command holding what ``attnlab ... --help``
prints for it, at a fixed width. The committed page is what the command line prints now (so every help
text, choice, metavar and default of every verb and task is pinned at once), it is in the site's nav,
it does not depend on the terminal's width, and facts written here by hand are on it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.cli._reference import reference_markdown

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"
REGENERATE = "python -m attnlab.cli._reference > docs/cli.md   (or: make cli-reference)"

# every command, in the order of `attnlab --help` and `attnlab train --help` (written here by hand)
COMMANDS = [
    "attnlab", "attnlab explain", "attnlab verify", "attnlab view",
    "attnlab train", "attnlab train seq2seq", "attnlab train lm", "attnlab train caption",
    "attnlab experiment", "attnlab experiment bottleneck", "attnlab experiment vision",
    "attnlab experiment distance", "attnlab experiment alignment", "attnlab experiment length",
    "attnlab experiment rope-scaling", "attnlab experiment faithfulness", "attnlab experiment recommendation",
    "attnlab translate", "attnlab evaluate", "attnlab generate", "attnlab caption", "attnlab plot-run",
    "attnlab interpret", "attnlab check", "attnlab pretrained",
]  # fmt: skip


def sections(page: str) -> dict[str, str]:
    """The page read on its own: each ``## attnlab ...`` heading → the text of its ```text block."""
    found = re.findall(r"^## (attnlab[^\n]*)\n\n```text\n(.*?)\n```$", page, re.M | re.S)
    return dict(found)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_the_committed_page_is_what_the_command_line_prints(page):
    written = reference_markdown()
    if written != page:
        old, new = page.splitlines(), written.splitlines()
        at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        shown = f"line {at + 1}: page {old[at : at + 1]!r}, command line {new[at : at + 1]!r}"
        pytest.fail(
            f"docs/cli.md is not what the command line prints ({shown}); regenerate it: {REGENERATE}"
        )


def test_the_page_has_one_section_per_command_in_the_order_of_help(page):
    assert page.startswith("# Command reference\n")
    assert list(sections(page)) == COMMANDS
    assert page.count("\n## ") == len(COMMANDS) + 1  # and the vocabulary, before the commands
    assert page.index("\n## One name for each thing\n") < page.index("\n## attnlab\n")


def test_the_page_writes_down_the_vocabulary():
    page = reference_markdown()
    table = page.split("## One name for each thing", 1)[1].split("\n## ", 1)[0]
    for row in ("| `--text` |", "| `--checkpoint DIR` |", "| `--device`, `--precision` |", "| `--lang` |",
                "| `--caption-lang` |"):
        assert row in table
    assert "`--prompt` (`generate`)" in table and "`--output` (`view`, `plot-run`)" in table
    assert "`--run` (`interpret`, `experiment faithfulness`)" in table and "`--dtype` (`check`)" in table


def test_the_page_is_in_the_sites_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "  - Command reference: cli.md\n" in nav


def run_help(words: list[str], monkeypatch) -> str:
    """What ``attnlab WORDS --help`` prints on stdout (and that it exits 0 after printing it)."""
    monkeypatch.setenv("COLUMNS", "102")  # argparse wraps at COLUMNS - 2
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([*words, "--help"])
    assert exit_.value.code == 0
    return out.getvalue()


def one_metavar(text: str) -> str:
    """Options written as ``-o OUT, --out OUT`` (Python before 3.13) the way 3.13 writes them: ``-o, --out OUT``."""
    return re.sub(r"(?<![\w-])(-[\w-]+) (\S+), (?=-)", r"\1, ", text)


def test_each_section_is_what_help_prints_for_its_command(page, monkeypatch):
    shown = sections(page)
    for command in COMMANDS:
        printed = run_help(command.split()[1:], monkeypatch)
        assert printed.startswith(f"usage: {command} [-h]"), command
        assert flat(one_metavar(printed)) == flat(shown[command]), (
            f"{command}: regenerate: {REGENERATE}"
        )


def test_the_page_does_not_depend_on_the_terminals_width(page, monkeypatch):
    for columns in ("40", "250"):
        monkeypatch.setenv("COLUMNS", columns)
        assert reference_markdown() == page
    wrapped = [
        line
        for text in sections(page).values()
        for line in text.splitlines()
        if line.startswith(" " * 24)
    ]
    assert len(wrapped) > 100
    assert max(map(len, wrapped)) == 100  # option help wraps at 100 columns


def test_facts_of_the_source_are_on_the_page(page):
    """Options, choices and defaults as the verbs' sources and docs intend them (written here by hand)."""
    s = {name: flat(text) for name, text in sections(page).items()}
    assert (
        "usage: attnlab translate [-h] [--text TEXT] (--checkpoint DIR | --pretrained NAME)"
        in s["attnlab translate"]
    )
    for verb in ("translate", "evaluate", "generate", "caption", "interpret"):
        assert (
            "--pretrained NAME a trained model that ships with attnlab instead (attnlab pretrained list)"
            in s[f"attnlab {verb}"]
        ), verb
    assert "--beam BEAM beam size (default 1 = greedy)" in s["attnlab translate"]
    seq2seq = s["attnlab train seq2seq"]
    assert "--attention {none,bahdanau,luong} the decoder (default bahdanau)" in seq2seq
    assert "--score {dot,general,concat} Luong's score (default general)" in seq2seq
    assert (
        "--positional {sinusoidal,learned,rope} positional encoding (default sinusoidal)" in seq2seq
    )
    assert (
        "--steps STEPS optimizer steps in all; with --resume, the new total (default 3000)"
        in seq2seq
    )
    assert (
        "--numbers, --n N numbers-*: how many numbers in all splits (default 20000; --n is the old spelling)"
        in seq2seq
    )
    assert "--layers" not in seq2seq.replace(
        "--layers, --heads and --pos still work", ""
    )  # the old spelling is hidden
    lm = s["attnlab train lm"]
    assert "--positional {sinusoidal,learned,rope,alibi} (default learned)" in lm
    assert "--cp-mode {ring,ulysses}" in lm
    for train in ("seq2seq", "lm", "caption"):
        text = s[f"attnlab train {train}"]
        assert "--out OUT the checkpoint folder to write (required, as in every train verb)" in text
        assert (
            "--device {auto,cpu,cuda,mps} where to train: auto (CUDA when present, else CPU; default), cpu, cuda, mps"
            in text
        )
        assert (
            "--precision {fp32,bf16} fp32 (default) or bf16 (autocast around the forward and the loss)"
            in text
        )
        assert (
            "--tensorboard also write TensorBoard events to OUT/tensorboard (needs attnlab[tensorboard])"
            in text
        )
        assert "--on-nonfinite {stop,skip}" in text
    assert "--widths WIDTHS channels per block (default 16,32,48)" in s["attnlab experiment vision"]
    assert (
        "-o, --out OUT the HTML page to write (default attention.html)" in s["attnlab view"]
    )
    assert "-o, --out OUT the PNG to write (default curves.png)" in s["attnlab plot-run"]
    assert (
        "usage: attnlab pretrained [-h] {list,info,path,recipe} [name]" in s["attnlab pretrained"]
    )
    assert "--lang {en,zh} language of the walkthrough (default en)" in s["attnlab explain"]
    top = s["attnlab"]
    assert "usage: attnlab [-h] [--version] VERB ..." in top
    assert "Attention mechanisms, computed step by step and fast." in top
    for verb in ("explain", "verify", "view", "train", "experiment", "translate", "evaluate", "generate",
                 "caption", "plot-run", "interpret", "check", "pretrained"):  # fmt: skip
        assert (
            f"\n    {verb} " in sections(page)["attnlab"]
            or f"\n    {verb}\n" in sections(page)["attnlab"]
        ), verb
