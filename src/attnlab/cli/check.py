"""``attnlab check MODULE:FUNCTION``: run the attention contract on your own function.

The function is imported (``package.module:function``, or ``path/to/file.py:function``) and
checked by ``attnlab.testing.check`` with the signature you declare; the report is printed,
and the exit code is 0 when every rule holds, 1 when one is broken, 2 when the function cannot be
checked (it is not there, your file does not import, an option is refused), in one line. A function
that exits or hangs fails the case it did it in; the report is printed all the same.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import sys
from pathlib import Path

from ._deprecated import deprecated_alias
from ._errors import UsageError
from ._static import constant
from ._threads import add_threads

# --precision: the short names every verb uses, and torch's own names of the same dtypes
DTYPES = {"fp32": "float32", "fp64": "float64", "fp16": "float16", "bf16": "bfloat16",
          "float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16"}


def add_parser(sub: argparse._SubParsersAction, help: str) -> None:
    p = sub.add_parser("check", help=help, description=help + ". Exit 0 when every rule "
                       "holds, 1 when one is broken (each failure printed with its smallest input; a function that exits or "
                       "hangs fails the case it did it in), 2 when the function cannot be checked.")
    p.add_argument("target", metavar="MODULE:FUNCTION",
                   help="the function to check: package.module:function or path/to/file.py:function")
    p.add_argument("--signature", choices=sorted(constant("testing.signatures", "SIGNATURES")), default="qkv_mask",
                   help="how the function takes its mask (default qkv_mask: fn(q, k, v, mask), True = may attend)")
    p.add_argument("--precision", action="append", choices=DTYPES, metavar="PRECISION",
                   help="the inputs' precision to try: fp32, bf16, fp16 or fp64 (or torch's names: float32, ...) "
                        "(repeatable; default fp32)")
    deprecated_alias(p, "--dtype", "--precision")
    p.add_argument("--device", action="append", help="device to try (repeatable; default cpu)")
    p.add_argument("--no-grad", action="store_true", help="check outputs only, not the gradients of q, k and v")
    p.add_argument("--causal", choices=["top_left", "bottom_right"], default="top_left",
                   help="how the function aligns its causal mask when q != k (default top_left, as SDPA)")
    p.add_argument("--seed", type=int, default=0, help="the seed of every random input, 0 to 2**32 - 1 (default 0)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="the time one call of the function may take before its case fails as hung and the "
                        "remaining cases are not run (default 120)")
    p.add_argument("--examples", type=int, default=0, metavar="N",
                   help="also try N generated inputs (needs hypothesis: pip install 'attnlab[testing]'); "
                        "a failure is shrunk to the smallest input")
    p.add_argument("--reproducers", action="store_true", help="also print each failure's reproducer (Python)")
    add_threads(p)
    p.set_defaults(func=run_check)


def _your_error(where: str, e: BaseException) -> UsageError:
    """The one line for an error raised by the user's own code while it is imported."""
    if isinstance(e, SyntaxError):
        return UsageError(f"{where}: your code has a syntax error at line {e.lineno}: {e.msg}")
    if isinstance(e, SystemExit):
        return UsageError(f"{where}: your code called sys.exit({e.code!r}) while it was imported")
    text = " ".join(str(e).split())
    return UsageError(f"{where}: your code raised {type(e).__name__} while it was imported"
                      + (f": {text}" if text else ""))


def _import_file(where: str):
    path = Path(where)
    if not path.is_file():
        raise UsageError(f"{where}: no such file")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{where}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    registered = sys.modules.setdefault(path.stem, module) is module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        if registered:
            del sys.modules[path.stem]
        raise _your_error(where, e) from None
    return module


def load_function(target: str):
    """``module:function`` or ``file.py:function`` → the function (a clear error when it is not there,
    or when the user's code fails to import)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"give the function as MODULE:FUNCTION (e.g. mypkg.attn:attention); got {target!r}")
    if where.endswith(".py"):
        module = _import_file(where)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as e:
            raise UsageError(f"cannot import {where!r}: {e}") from None
        except (Exception, SystemExit) as e:
            raise _your_error(where, e) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{where} has no function {name!r}")
    return fn


def run_check(args: argparse.Namespace) -> int:
    import torch

    from ..testing import check
    from ..testing.arguments import SEEDS

    if args.examples < 0:
        raise UsageError(f"--examples must be >= 0; got {args.examples}")
    if not 0 <= args.seed < SEEDS:
        raise UsageError(f"--seed must be from 0 to 2**32 - 1; got {args.seed}")
    if not 0 < args.timeout < math.inf:
        raise UsageError(f"--timeout must be a positive number of seconds; got {args.timeout:g}")
    fn = load_function(args.target)
    dtypes = [getattr(torch, DTYPES[d]) for d in (args.precision or ["fp32"])]
    try:
        report = check(fn, signature=args.signature, dtypes=dtypes, devices=args.device or ["cpu"],
                       grad=not args.no_grad, seed=args.seed, causal=args.causal, examples=args.examples,
                       timeout=args.timeout)
    except (ValueError, TypeError) as e:  # an option refused before the function was called
        raise UsageError(str(e).replace("devices: ", "--device ")) from None
    print(report)
    if args.reproducers:
        for failure in report.failures:
            print(f"\n# reproducer: {failure.case}\n{failure.reproducer()}")
    return 0 if report.ok else 1
