"""Command-line options derived from the config dataclasses: one definition of each default.

``field_option(group, Config, "emb_dim", "--emb", help=...)`` adds an option whose ``dest`` is
the field's name and whose default and type are the field's, so a default changed in the
dataclass is the command line's default too, and ``config_from(args, Config)`` builds the
dataclass from the parsed options, each value checked once (``attnlab._limits``). A ``bool`` field that defaults to True becomes a
``--no-...``-style switch (``store_false``) under the spelling given.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields, replace
from typing import Any

from .._limits import check_values
from ._static import Defaults
from ._threads import add_threads


def field_default(cls: type | Defaults, name: str) -> Any:
    """The default of ``cls``'s field ``name``; ``cls`` a dataclass, or its fields as read from its
    source (``attnlab.cli._static.defaults``: a parser then needs no import of the config's module)."""
    if isinstance(cls, Defaults):
        return cls.default(name)
    f = {f.name: f for f in fields(cls)}.get(name)
    if f is None:
        raise KeyError(f"{cls.__name__} has no field {name!r}")
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise KeyError(f"{cls.__name__}.{name} has no default")


def field_option(group, cls: type | Defaults, name: str, *flags: str, help: str = "", **kw) -> None:
    """An option for the dataclass field ``name``: dest, default and type from the dataclass."""
    default = kw.pop("default") if "default" in kw else field_default(cls, name)
    flags = flags or ("--" + name.replace("_", "-"),)
    if isinstance(default, bool):
        action = "store_false" if default else "store_true"
        group.add_argument(*flags, dest=name, action=action, default=default, help=help)
        return
    typed = default if default is not None else field_default(cls, name)
    if "type" not in kw and "choices" not in kw and typed is not None:
        kw["type"] = type(typed)
    shown = "" if "(default" in help else f" (default {default if default is not None else field_default(cls, name)})"
    group.add_argument(*flags, dest=name, default=default, help=(help + shown).strip(), **kw)


def config_from(args: argparse.Namespace, cls: type, *, flags: dict[str, str] | None = None, **extra: Any):
    """``cls`` built from the options ``args`` holds for its fields (and ``extra``); an option left
    at None takes the dataclass's default. Every value is checked first (``attnlab._limits``: types,
    finiteness, ranges): a ValueError naming the flag (``flags``: field → flag where the two are
    spelled otherwise, e.g. ``d_model`` → ``--dim``), the value and what it must be."""
    names = {f.name for f in fields(cls)} - set(extra)
    values = {**{k: v for k, v in vars(args).items() if k in names and v is not None}, **extra}
    try:
        check_values(cls, values)
    except ValueError as e:
        field = next((f for f in (flags or {}) if str(e).startswith(f + " ")), None)
        if field is None:
            raise
        raise ValueError(flags[field] + str(e)[len(field):]) from None
    return cls(**values)


def preset(cls: type, args: argparse.Namespace, **given: Any):
    """An experiment's config: ``cls.quick()`` under ``--quick``, else ``cls()``, with each of ``given``
    that is not None (the options the user gave) on top."""
    cfg = cls.quick() if args.quick else cls()
    return replace(cfg, **{k: v for k, v in given.items() if v is not None})


def add_outputs(p: argparse.ArgumentParser, out: str, files: str, run: Any, *,
                threads: str = "torch threads (default 1)") -> None:
    """The options an experiment's command ends with: ``--threads`` (default 1), ``--out`` (default the
    folder ``out``, for ``files``) and ``--quiet``; ``run`` is the function the command calls."""
    add_threads(p, default=1, help=threads)
    p.add_argument("--out", default=out, help=f"folder for {files}")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def saved_config(out: str, cls: type, **given: Any):
    """``cls`` as the training run in folder ``out`` saved it (its config.json's ``"train"``), with the
    options ``given`` on top (``--resume``): a ValueError when ``out`` holds no checkpoint."""
    from pathlib import Path

    from ..train.checkpoint import load_checkpoint

    if not (Path(out) / "config.json").is_file():
        raise ValueError(f"--resume: no checkpoint to resume at {out}")
    saved = load_checkpoint(out)[1].get("train", {})
    if not isinstance(saved, dict):
        raise ValueError(f"--resume: {out}/config.json: 'train' must be an object of settings; got {type(saved).__name__}")
    names = {f.name for f in fields(cls)}
    kept = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items() if k in names}  # JSON lists → tuples
    try:
        check_values(cls, kept, f"{out}/config.json: train.")
    except ValueError as e:
        raise ValueError(f"--resume: {e}") from None
    return cls(**{**kept, **given})  # the options given are checked as the config is built


__all__ = ["field_option", "field_default", "config_from", "saved_config"]
