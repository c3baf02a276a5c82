"""argparse ``type=`` functions shared by the verbs: a bad value is one line naming flag and value (exit 2)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer; got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; got {v}")
    return v


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number; got {text!r}") from None
    if not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a weight in (0, 1]; got {v}")
    return v


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers (at least one)."""
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers; got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer; got {text!r}")
    return values


def positive_int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers, each >= 1."""
    values = int_list(text)
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"every value must be >= 1; got {text!r}")
    return values


__all__ = ["positive_int", "fraction", "int_list", "positive_int_list"]
