"""``attnlab train TASK``: train a model and write a checkpoint folder."""

from . import VERBS
from ._group import add_group

TASKS = ["seq2seq", "lm", "caption"]


def add_parser(sub) -> None:
    add_group(sub, "train", TASKS, VERBS["train"])
