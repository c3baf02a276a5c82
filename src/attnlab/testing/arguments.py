"""The arguments of ``check``, refused before the function under test is called: a bad one raises
``ValueError`` or ``TypeError`` in one line that names the argument, what was given and what to give;
so does a run that would try nothing (no dtype, no device, no case)."""

from __future__ import annotations

import math
import numbers

import torch

from .cases import CASES
from .reference import ALIGNMENTS
from .rules import BUDGET
from .signatures import Signature
from .signatures import signature as _signature

SEEDS = 2**32  # seeds are 0 … 2**32 - 1


def _sequence(name: str, given, example: str) -> list:
    if isinstance(given, (str, torch.dtype, torch.device)) or not hasattr(given, "__iter__"):
        raise TypeError(f"{name}={given!r} is not a sequence; give a list or tuple, e.g. {name}={example}")
    items = list(given)
    if not items:
        raise ValueError(f"{name}={given!r} selects nothing, so no case would run; give at least one, "
                         f"e.g. {name}={example}")
    return items


def _dtypes(dtypes) -> list[torch.dtype]:
    items = _sequence("dtypes", dtypes, "(torch.float32,)")
    for d in items:
        if not isinstance(d, torch.dtype):
            raise TypeError(f"dtypes: {d!r} is not a torch.dtype; give torch.float32, torch.float64, "
                            "torch.float16 or torch.bfloat16")
        if d not in BUDGET:
            raise ValueError(f"dtypes: {d} is not a dtype the checker runs attention in; give torch.float32, "
                             "torch.float64, torch.float16 or torch.bfloat16")
    return items


def _available(name: str, device: torch.device) -> None:
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"devices: {name!r} is not available here (torch.cuda.is_available() is False); "
                             "check on 'cpu', or on a machine with CUDA")
        if device.index is not None and device.index >= count:
            raise ValueError(f"devices: {name!r} is not available here: this machine has {count} CUDA "
                             f"device(s), cuda:0 to cuda:{count - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"devices: {name!r} is not available here (torch.backends.mps.is_available() is "
                         "False); check on 'cpu'")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"devices: {name!r} is not a device the checker runs on; give 'cpu', 'cuda' or 'mps'")


def _devices(devices) -> list:
    items = _sequence("devices", devices, "('cpu',)")
    for d in items:
        if not isinstance(d, (str, torch.device)):
            raise TypeError(f"devices: {d!r} is not a device; give names such as 'cpu' or 'cuda'")
        try:
            device = torch.device(d)
        except (RuntimeError, ValueError):
            raise ValueError(f"devices: {d!r} is not a device name; give names such as 'cpu', 'cuda' "
                             "or 'cuda:1'") from None
        _available(str(d), device)
    return items


def _cases(cases) -> list[str]:
    names = [c.name for c in CASES]
    if cases is None:
        return names
    items = _sequence("cases", cases, "('values',)")
    for c in items:
        if c not in names:
            raise ValueError(f"cases: {c!r} is not a case of the checker; the cases are {names}")
    return items


def _numbers(grad, seed, scale, examples, timeout) -> None:
    if not isinstance(grad, bool):
        raise TypeError(f"grad={grad!r} is not True or False")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed={seed!r} is not an integer; give one from 0 to 2**32 - 1")
    if not 0 <= seed < SEEDS:
        raise ValueError(f"seed={seed} is out of range; give an integer from 0 to 2**32 - 1")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)
                              or not math.isfinite(scale)):
        raise ValueError(f"scale={scale!r} is not a finite number; give the factor on q·k that the function "
                         "applies, or None for 1/√d")
    if isinstance(examples, bool) or not isinstance(examples, numbers.Integral) or examples < 0:
        raise ValueError(f"examples={examples!r} is not an integer >= 0 (the number of generated inputs; "
                         "0 for none)")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                or not 0 < timeout < math.inf):
        raise ValueError(f"timeout={timeout!r} is not a positive number of seconds; give one (e.g. 60), "
                         "or None for no limit")


def validated(fn, signature, dtypes, devices, grad, seed, scale, causal, examples, cases, timeout
              ) -> tuple[Signature, list, list, list[str]]:
    """(the signature, the dtypes, the devices, the names of the cases to run), or the error that
    refuses the first bad argument."""
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable; give the attention function to check")
    sig = _signature(signature)
    if causal not in ALIGNMENTS:
        raise ValueError(f"causal={causal!r} is not one of {ALIGNMENTS}")
    _numbers(grad, seed, scale, examples, timeout)
    return sig, _dtypes(dtypes), _devices(devices), _cases(cases)


__all__ = ["SEEDS", "validated"]
