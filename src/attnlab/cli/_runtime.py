"""The options every training verb shares: ``--device``, ``--precision`` and ``--tensorboard``.

They build one ``attnlab.train.runtime.Runtime``; under ``torchrun`` it joins the process group.
"""

from __future__ import annotations

import argparse

from ..train.runtime import DEVICES, PRECISIONS, Runtime


def add_runtime(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("device and processes")
    g.add_argument("--device", choices=DEVICES, default="auto",
                   help="where to train: auto (CUDA when present, else CPU; default), cpu, cuda, mps")
    g.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32 (default) or bf16 (autocast around the forward and the loss)")
    g.add_argument("--tensorboard", action="store_true",
                   help="also write TensorBoard events to OUT/tensorboard (needs attnlab[tensorboard])")


def runtime_from(args: argparse.Namespace) -> Runtime:
    """The run's device, precision and (under torchrun) process group."""
    if args.tensorboard:
        import tensorboard  # noqa: F401  (fail now, with the extra to install, not after training)
    return Runtime.create(args.device, args.precision)
