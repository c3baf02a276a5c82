"""The device options: ``--device`` and ``--precision`` (every verb that runs a model) and ``--tensorboard``.

Training verbs (``add_runtime`` / ``runtime_from``) build one ``attnlab.train.runtime.Runtime``;
under ``torchrun`` it joins the process group. The verbs that only run a trained model
(``generate``, ``translate``, ``evaluate``, ``caption``, ``interpret heads``, ``view --hf``) take the
same two flags (``add_inference_device`` / ``inference_runtime``): one process, the model and its
inputs on the device, ``Runtime.autocast`` around the model's forward, results back on the CPU.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._static import constant
from ._threads import add_threads

if TYPE_CHECKING:
    from ..train.runtime import Runtime

DEVICES = constant("train.runtime", "DEVICES")  # read from its source: --help loads no torch
PRECISIONS = constant("train.runtime", "PRECISIONS")


def _add_device(g, what: str, autocast: str) -> None:
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help=f"where to {what}: auto (CUDA when present, else CPU; default), cpu, cuda, mps")
    g.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help=f"fp32 (default) or bf16 (autocast around {autocast})")


def add_runtime(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("device and processes")
    _add_device(g, "train", "the forward and the loss")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard events to OUT/tensorboard (needs attnlab[tensorboard])")


def runtime_from(args: argparse.Namespace) -> Runtime:
    """The run's device, precision and (under torchrun) process group."""
    if args.tensorboard:
        import tensorboard  # noqa: F401  (fail now, with the extra to install, not after training)
    from ..train.runtime import Runtime

    return Runtime.create(args.device, args.precision)


def add_inference_device(p: argparse.ArgumentParser, what: str = "run the model") -> None:
    """``--device`` and ``--precision`` for a verb that runs a trained model (no processes, no logs), and
    ``--threads`` (torch's CPU threads)."""
    _add_device(p.add_argument_group("device"), what, "the model's forward")
    add_threads(p)


def inference_runtime(args: argparse.Namespace) -> Runtime:
    """One process on ``--device`` (a missing device is a ValueError: one line, exit 2) with ``--precision``."""
    from ..train.runtime import Runtime

    return Runtime.local(args.device, args.precision)
