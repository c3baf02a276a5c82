"""An option that holds its own default (not one taken from a config field later) and whose help says
"(default N)" has N as that default, and the experiments that say they run
on one torch thread parse ``--threads`` as 1 when it is not given (the others leave torch's choice)."""

from __future__ import annotations

import argparse
import re

from cli_parsers import every_parser

from attnlab.cli import build_parser

# the experiments whose small steps run fastest on one thread (written here from their help texts)
ONE_THREAD = {"distance", "length", "alignment", "bottleneck", "rope-scaling", "recommendation", "faithfulness"}


def _options():
    for name, parser in every_parser(build_parser()):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                yield name, action


def test_every_number_a_help_text_gives_as_the_default_is_the_default():
    checked = []
    for name, action in _options():
        m = re.search(r"\(default (-?\d+(?:\.\d+)?)[):]", action.help or "")
        if m and action.default not in (None, argparse.SUPPRESS):  # None: the config's default applies
            assert action.default == float(m.group(1)), f"{name} {action.option_strings[-1]}: {action.default!r}"
            checked.append((name, action.dest))
    assert len(checked) >= 6
    assert {n.split()[-1] for n, dest in checked if dest == "threads"} == ONE_THREAD


def test_threads_is_one_for_the_small_experiments_and_unset_elsewhere():
    parser = build_parser()
    for task in ONE_THREAD:
        assert parser.parse_args(["experiment", task]).threads == 1, task
    assert parser.parse_args(["experiment", "vision"]).threads is None
    assert parser.parse_args(["verify", "--all"]).threads is None
