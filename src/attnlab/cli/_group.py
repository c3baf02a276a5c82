"""Verbs with sub-tasks (``attnlab train seq2seq``, ``attnlab experiment vision``).

A task ``NAME`` of group ``GROUP`` lives in the module ``attnlab.cli.GROUP_NAME`` with
``add_parser(sub)``. The group's own module imports its tasks (``tasks(__package__, "train", ...)``)
and hands them to ``add_group``: no task imports the group, so the arrows point one way.
"""

from __future__ import annotations

import argparse
from types import ModuleType


def add_group(sub: argparse._SubParsersAction, group: str, tasks: list[ModuleType], help: str) -> None:
    p = sub.add_parser(group, help=help, description=help)
    inner = p.add_subparsers(dest=f"{group}_task", metavar="TASK")
    inner.required = True
    for module in tasks:
        module.add_parser(inner)
