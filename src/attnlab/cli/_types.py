"""argparse ``type=`` functions shared by the verbs: a bad value is one line naming flag and value (exit 2)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


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


@dataclass(frozen=True)
class Span:
    """Tokens ``start`` to ``stop`` counted from 1, both included; negative counts from the end (-1: the last)."""

    start: int | None
    stop: int | None

    def indices(self, n: int) -> tuple[int, int]:
        """``(i, j)`` for ``tokens[i:j]`` of n tokens (clipped to them, as a slice is); ValueError when empty."""
        i = 0 if self.start is None else self.start - 1 if self.start > 0 else max(0, n + self.start)
        j = n if self.stop is None else min(n, self.stop) if self.stop > 0 else n + self.stop + 1
        if not 0 <= i < j:
            raise ValueError(f"--tokens {self} selects no token of the {n}")
        return i, j

    def __str__(self) -> str:
        return f"{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}"


def token_span(text: str) -> Span:
    """``A:B``: tokens A to B (from 1, both included; either may be left out; -64: is the last 64)."""
    a, colon, b = text.partition(":")
    try:
        ends = [int(t) if t.strip() else None for t in (a, b)]
    except ValueError:
        ends = []
    if not colon or not ends or 0 in ends:
        raise argparse.ArgumentTypeError(f"expected A:B, tokens A to B counted from 1 (-1 is the last; "
                                         f"-64: the last 64); got {text!r}")
    return Span(*ends)


__all__ = ["positive_int", "fraction", "int_list", "positive_int_list", "Span", "token_span"]
