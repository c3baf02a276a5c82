"""Verbs with sub-tasks (``attnlab train seq2seq``, ``attnlab experiment vision``).

A task ``NAME`` of group ``GROUP`` lives in the module ``attnlab.cli.GROUP_NAME``
with ``add_parser(sub)``; tasks whose module is not there yet are left out.
"""

from __future__ import annotations

import argparse
import importlib


def add_group(sub: argparse._SubParsersAction, group: str, tasks: list[str], help: str) -> None:
    p = sub.add_parser(group, help=help, description=help)
    inner = p.add_subparsers(dest=f"{group}_task", metavar="TASK")
    inner.required = True
    for task in tasks:
        name = f"attnlab.cli.{group}_{task.replace('-', '_')}"  # rope-scaling → experiment_rope_scaling
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        module.add_parser(inner)
