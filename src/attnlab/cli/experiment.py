"""``attnlab experiment NAME``: an experiment that turns a claim of the source tutorials into measurements."""

from . import VERBS
from ._group import add_group

EXPERIMENTS = ["bottleneck", "vision", "scaling", "distance", "alignment", "length", "rope-scaling", "faithfulness",
               "recommendation"]


def add_parser(sub) -> None:
    add_group(sub, "experiment", EXPERIMENTS, VERBS["experiment"])
