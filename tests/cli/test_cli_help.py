"""``attnlab VERB --help`` tells what each option is: the examples of a verb's description keep their
lines, every option that is not self-explanatory by its name has a help text, view's model sources say
they go with --text, and every option's default is one of the choices it offers."""

from __future__ import annotations

import argparse

from cli_parsers import every_parser

from attnlab.cli import build_parser

# options whose name says what they are (written here, not taken from attnlab)
SELF_EXPLANATORY = {"--seed", "--quiet", "--epochs", "--split", "--beam", "--lang", "--format"}


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_examples_of_a_description_keep_their_lines_in_help():
    shown = 0
    for name, parser in every_parser(build_parser()):
        lines = parser.format_help().splitlines()
        for line in (parser.description or "").splitlines():
            if line.startswith("    attnlab "):  # an indented example command
                assert line.rstrip() in lines, f"{name} --help joins its example: {line.strip()}"
                shown += 1
    assert shown >= 30  # the experiments, interpret, translate, pretrained, plot-run, train seq2seq


def test_every_option_says_what_it_is_unless_its_name_does():
    unexplained, seen = [], 0
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            seen += 1
            if not action.help and not set(action.option_strings) & SELF_EXPLANATORY:
                unexplained.append(f"{name} {'/'.join(action.option_strings)}")
    assert unexplained == []
    assert seen > 100


def help_of(*verb: str) -> str:
    """``attnlab VERB... --help``, on one line."""
    parser = build_parser(only=verb[0])
    for _, p in every_parser(parser):
        if p.prog == "attnlab " + " ".join(verb):
            return _flat(p.format_help())
    raise AssertionError(verb)


def test_help_of_the_options_a_verb_documents():
    assert "--last N rollout/flow: only the last N tokens (--tokens=-N:)" in help_of("interpret")
    assert "--widths WIDTHS channels per block (default 16,32,48)" in help_of("experiment", "vision")
    assert "--checkpoint DIR a translator: a folder written by attnlab train seq2seq" in help_of("evaluate")
    view = help_of("view")
    # each model source of view runs on --text
    assert "--hf MODEL_DIR a local Hugging Face model folder (BERT-, GPT-2- or T5-style; needs the hf extra); " \
           "with --text" in view
    assert "--checkpoint DIR an attnlab checkpoint folder (translator, GPT or captioner); with --text" in view
    assert "--pretrained NAME a trained model that ships with attnlab (attnlab pretrained list); with --text" in view


def test_every_default_is_one_of_the_choices():
    checked = 0
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            if action.choices is None or isinstance(action, argparse._SubParsersAction):
                continue
            if action.default in (None, argparse.SUPPRESS):
                continue
            assert action.default in action.choices, f"{name} {action.option_strings}: {action.default!r}"
            checked += 1
    assert checked >= 20


def test_every_verb_and_task_is_listed_with_what_it_does():
    """Each sub-command has a line of help in its parent's list (``attnlab --help``, ``attnlab train --help``, ...)."""
    listed = {}
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    listed[f"{name} {choice.dest}".strip()] = choice.help
    assert [k for k, text in listed.items() if not text] == []
    assert len(listed) >= 20
    top = _flat(build_parser().format_help())
    assert "pretrained the models that ship trained: list them, read a model card, its folder or its recipe" in top
    assert "check check your own attention function against the contract (masks, NaN, empty input, values)" in top
    train = help_of("train")
    assert "caption train an image captioner on Twemoji scenes (or single emoji) and their CLDR names" in train
    assert "seq2seq a translation model: RNN encoder-decoder or Transformer" in train


def test_help_of_the_training_and_pretrained_verbs_says_what_they_take():
    caption = help_of("train", "caption")
    assert "Train a captioner whose decoder attends to a grid of image regions. Images: Twemoji (CC-BY 4.0)" in caption
    assert "--limit LIMIT emoji: train on a random sample of N images (default: all)" in caption
    assert "--resume continue the run in --out where it stopped" in help_of("train", "seq2seq")
    assert "name a shipped model (info, path, recipe)" in help_of("pretrained")
