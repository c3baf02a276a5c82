"""``attnlab train TASK``: train a model and write a checkpoint folder."""

import importlib

from ._group import add_group

TASKS = ["seq2seq", "lm", "caption"]


def add_parser(sub, help: str) -> None:
    add_group(sub, "train", [importlib.import_module(f"{__package__}.train_{task}") for task in TASKS], help)
