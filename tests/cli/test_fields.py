"""``field_option``: an option made from a config dataclass's field takes its dest, default and type from
the field, or its type from the default given in its place."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from attnlab.cli._fields import field_option


@dataclass
class _C:
    rate: float = 0.5
    limit: int | None = None


def test_an_option_takes_its_type_from_the_field_or_from_the_default_given():
    p = argparse.ArgumentParser()
    field_option(p, _C, "rate")
    field_option(p, _C, "limit", default=8)  # the field defaults to None: the type is the given default's
    assert vars(p.parse_args([])) == {"rate": 0.5, "limit": 8}
    args = p.parse_args(["--rate", "2", "--limit", "3"])
    assert (args.rate, type(args.rate), args.limit, type(args.limit)) == (2.0, float, 3, int)
    helps = {a.dest: a.help for a in p._actions}
    assert (helps["rate"], helps["limit"]) == ("(default 0.5)", "(default 8)")
