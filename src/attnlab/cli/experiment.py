"""``attnlab experiment NAME``: an experiment that turns a claim of the source tutorials into measurements."""

import importlib

from ._group import add_group

EXPERIMENTS = ["bottleneck", "vision", "distance", "alignment", "length", "rope-scaling", "faithfulness",
               "recommendation"]


def add_parser(sub, help: str) -> None:
    modules = [importlib.import_module(f"{__package__}.experiment_{name.replace('-', '_')}") for name in EXPERIMENTS]
    add_group(sub, "experiment", modules, help)
