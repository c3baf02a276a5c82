"""Tests' helper: every (name, parser) of the command line, each verb and each task of a verb."""

from __future__ import annotations

import argparse


def every_parser(parser: argparse.ArgumentParser, name: str = "attnlab"):
    """Every (name, parser) under ``parser``: each verb and each task of a verb."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from every_parser(p, f"{name} {sub}")
