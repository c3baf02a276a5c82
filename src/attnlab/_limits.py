"""What every config field and numeric flag may hold: one table, one check.

Every dataclass config of attnlab (the models' configs, the training configs) and every
numeric command-line flag is checked here, by field name, whether its values come from
the command line, from a checkpoint's ``config.json`` or from ``--resume`` overrides:

* the type the dataclass declares (an ``int`` field takes an integer, not ``128.0``,
  ``"128"``, ``true`` or ``null`` unless its default is None);
* a float is finite (no NaN, no infinity: ``1e400`` reads as infinity);
* the range in ``LIMITS``: sizes from 1 (or 0) up to a bound far above any model
  attnlab trains, so that an absurd size is one line instead of an allocator error
  or a loop that does not end; learning rates and decays positive and bounded.

A bad value raises ``ValueError`` naming the field, the value and what is expected.
``check_parameters`` bounds the size of a whole model, counted before anything is allocated.
"""

from __future__ import annotations

import math
import numbers
import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Limit:
    """A closed range [lo, hi]; ``open_lo``/``open_hi`` exclude an end."""

    lo: float
    hi: float
    open_lo: bool = False
    open_hi: bool = False

    def problem(self, v: float) -> str | None:
        """What ``v`` breaks (``">= 1"``), or None when it lies in the range."""
        if not (v > self.lo if self.open_lo else v >= self.lo):
            return f"{'>' if self.open_lo else '>='} {_num(self.lo)}"
        if not (v < self.hi if self.open_hi else v <= self.hi):
            return f"{'<' if self.open_hi else '<='} {_num(self.hi)}"
        return None

    def text(self) -> str:
        return f"{'(' if self.open_lo else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.open_hi else ']'}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


WIDTH = Limit(1, 2**16)  # a layer's width: d_model, hidden sizes, channels
LAYERS = Limit(1, 1024)
HEADS = Limit(1, 4096)
VOCAB = Limit(1, 2**24)
LENGTH = Limit(1, 2**20)  # sequence lengths, contexts, images' sides are below this
COUNT = Limit(1, 10**9)  # steps, epochs, examples
EVERY = Limit(0, 10**9)  # 0 = "only at the end"
EXAMPLES = Limit(1, 10**7)  # examples generated in memory

LIMITS: dict[str, Limit] = {
    # models
    "vocab_size": VOCAB, "src_vocab": VOCAB, "tgt_vocab": VOCAB, "num_classes": VOCAB, "pad_id": Limit(0, 2**24),
    "dim": WIDTH, "d_model": WIDTH, "emb_dim": WIDTH, "hidden": WIDTH, "attn_dim": WIDTH, "widths": WIDTH,
    "ffn_dim": Limit(1, 2**18), "in_channels": Limit(1, 4096), "reduction": WIDTH, "kernel_size": Limit(1, 1023),
    "num_layers": LAYERS, "num_encoder_layers": LAYERS, "num_decoder_layers": LAYERS, "layers": LAYERS,
    "num_heads": HEADS, "num_kv_heads": HEADS,
    "block_size": LENGTH, "max_len": LENGTH, "image_size": Limit(1, 8192),
    "dropout": Limit(0, 1),
    # training
    "steps": COUNT, "epochs": Limit(1, 10**6), "batch_size": Limit(1, 2**20), "eval_batches": Limit(1, 10**6),
    "eval_every": EVERY, "save_every": EVERY, "log_every": COUNT, "warmup": EVERY, "valid_decode": EVERY,
    "lr": Limit(0, 100, open_lo=True), "weight_decay": Limit(0, 10), "clip": Limit(0, 10**6),
    "val_fraction": Limit(0, 1, open_lo=True, open_hi=True), "max_seconds": Limit(0, 10**9, open_lo=True),
    "seed": Limit(0, 2**63 - 1), "context_parallel": Limit(1, 1024),
    "n_train": EXAMPLES, "n_test": EXAMPLES, "limit": EXAMPLES, "cells": Limit(1, 64), "max_objects": Limit(1, 64),
    "pool": Limit(1, 10**6), "n": EXAMPLES, "max_digits": Limit(1, 1000),
    "threads": Limit(1, 1024), "plays": Limit(1, 1000),
    # sampling (attnlab generate)
    "tokens": Limit(0, 10**5), "temperature": Limit(0, 100), "top_k": VOCAB,
}

MAX_PARAMETERS = 2**32  # 16 GiB of float32 weights: far above any model attnlab trains


def _kind(annotation: Any) -> tuple[type | None, bool, bool]:
    """(the scalar type, whether None is allowed, whether it is a tuple of them) of an annotation."""
    args = typing.get_args(annotation)
    if annotation in (int, float, str, bool):
        return annotation, False, False
    if typing.get_origin(annotation) is tuple:
        return (args[0] if args else None), False, True
    if args and type(None) in args:  # X | None
        inner = [a for a in args if a is not type(None)]
        base, _, many = _kind(inner[0]) if len(inner) == 1 else (None, False, False)
        return base, True, many
    return None, False, False


def _scalar(name: str, v: Any, base: type | None) -> str | None:
    """What is wrong with one value ``v`` of field ``name`` (None when nothing is)."""
    limit = LIMITS.get(name)
    if base is bool:
        return None if isinstance(v, bool) else "true or false"
    if base is str:
        return None if isinstance(v, str) else "a string"
    if base is int and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
        return f"an integer in {limit.text()}" if limit else "an integer"
    if base is float:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return f"a number in {limit.text()}" if limit else "a number"
        if not math.isfinite(v):
            return f"a finite number in {limit.text()}" if limit else "a finite number"
    return limit.problem(v) if limit is not None else None


def check_value(name: str, value: Any, annotation: Any = float, where: str = "", *, label: str | None = None) -> None:
    """Raise ValueError when ``value`` does not fit the field ``name`` declared as ``annotation``;
    the message names it ``where + name``, or ``label`` (a flag, say) when given."""
    base, optional, many = _kind(annotation)
    if value is None:
        if optional:
            return
        problem = f"{_expected(name, base, many)}, not null"
    elif many:
        ok = isinstance(value, (list, tuple)) and len(value) > 0
        problem = None if ok else f"a non-empty list of {_expected(name, base, False)}"
        for item in (value if ok else []):
            problem = problem or _scalar(name, item, base)
    else:
        problem = _scalar(name, value, base)
    if problem:
        raise ValueError(f"{label or where + name} must be {problem}; got {_show(value)}")


def _expected(name: str, base: type | None, many: bool) -> str:
    limit = LIMITS.get(name)
    what = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(base, "a value")
    return what + (f" in {limit.text()}" if limit and base in (int, float) else "") + (" each" if many else "")


def _show(v: Any) -> str:
    text = "null" if v is None else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_values(cls: type, values: dict[str, Any], where: str = "") -> None:
    """Check each entry of ``values`` that names a field of the dataclass ``cls``; a required field
    that is missing is an error too. ``where`` prefixes the message (``"config.json: model."``)."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name in values:
            check_value(f.name, values[f.name], hints[f.name], where)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{where}{f.name} is missing")


def check_fields(obj: Any, where: str = "") -> None:
    """Check every field of the dataclass instance ``obj`` (call it from ``__post_init__``)."""
    check_values(type(obj), {f.name: getattr(obj, f.name) for f in fields(obj)}, where)


def check_parameters(n: int, what: str) -> None:
    """A model of ``n`` parameters is too big to build here: one line saying so."""
    if n > MAX_PARAMETERS:
        raise ValueError(f"{what} would have {n:,} parameters ({4 * n / 2**30:,.0f} GiB in float32); "
                         f"attnlab builds models of at most {MAX_PARAMETERS:,}: choose smaller sizes")


def check_step(value: Any, where: str) -> int:
    """A checkpoint's step (or epoch) counter: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where} must be an integer >= 0; got {_show(value)}")
    return value


__all__ = ["Limit", "LIMITS", "MAX_PARAMETERS", "check_value", "check_values", "check_fields", "check_parameters",
           "check_step"]
