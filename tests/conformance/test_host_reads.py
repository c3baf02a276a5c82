"""No host reads on the hot path: every entry's forward and backward, counted.

A read of a tensor's value into Python (``.item()``, ``bool(t)``, ``int(t)``, ``.tolist()``,
``.numpy()``) is a device synchronisation on a GPU. The issue's check is "count them"; on
this CPU-only machine they are counted with a ``TorchFunctionMode`` that sees every such
call, whatever the device. Where a GPU is present, ``tests/kernels/test_contract.py`` also
runs the kernels under ``torch.cuda.set_sync_debug_mode("error")``.

On a CPU, run eagerly, ``attnlab.attention`` looks before it guards (one summation pass to
see that the inputs are finite and one read of whether a row is fully masked, in place of the
guard's copies; ``functional.attention._host_checks``); elsewhere that look-ahead is off. The
test turns it off, as on a GPU, and requires zero reads; a second test bounds the CPU's reads.

The CPU block-sparse kernel reads CPU tensors: its inputs once, to decide whether the
non-finite rule is needed, and the pattern's index tensors (global tokens) while planning
its tiles; no device is synchronised on a CPU, and on CUDA these entries go through
flex_attention instead. They are listed with their bound, which the test enforces.
"""

from __future__ import annotations

import importlib
import traceback

import pytest
import torch
from conformance.entries import ENTRIES
from torch.overrides import TorchFunctionMode

core = importlib.import_module("attnlab.functional.attention")  # the module (the package exports the function)

READS = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
         torch.Tensor.__index__, torch.Tensor.tolist, torch.Tensor.numpy}

# entries whose CPU kernel reads its (CPU) inputs, with the most reads allowed per forward + backward
CPU_KERNEL_READS = {name: 10 for name in ("local", "longformer", "bigbird", "sparse", "neighborhood-2d", "kernels.block_sparse_attention",
                                         "kernels.topk_attention", "kernels.block_sparse_attention[pattern and mask]")}


class HostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.where: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in READS:
            frame = traceback.extract_stack(limit=3)[0]
            self.where.append(f"{func.__name__} at {frame.filename.split('src/')[-1]}:{frame.lineno}")
        return func(*args, **(kwargs or {}))


def _as_on_a_gpu(monkeypatch) -> None:
    """Turn the CPU's look-ahead off everywhere it is used: the core's global and every module that
    imported ``nonfinite.host_checks`` (the ring, for one)."""
    import sys

    from attnlab.functional.nonfinite import host_checks

    monkeypatch.setattr(core, "_host_checks", lambda t: False)
    for name, module in list(sys.modules.items()):
        if name.startswith("attnlab.") and getattr(module, "host_checks", None) is host_checks:
            monkeypatch.setattr(module, "host_checks", lambda t: False)


def _pad(b: int, k: int) -> torch.Tensor:
    pad = torch.ones(b, k, dtype=torch.bool)
    pad[1, k - 2:] = False
    return pad


def _count(name: str) -> list[str]:
    entry = ENTRIES[name]
    case = entry.make(dtype=torch.float32)
    pad = _pad(2, case.inputs[entry.kv[0]].shape[entry.kv_axis]) if entry.masked and entry.kv else None
    path = entry.paths[0]
    with HostReads() as reads:
        out, _ = case.run(path, pad, False)
        leaves = [t for t in [*case.inputs.values(), *case.params] if t.requires_grad]
        if out.requires_grad and leaves:
            torch.autograd.grad(out.sum(), leaves, allow_unused=True)
    return reads.where


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_forward_and_backward_read_nothing_back(name, monkeypatch):
    _as_on_a_gpu(monkeypatch)
    where = _count(name)
    allowed = CPU_KERNEL_READS.get(name, 0)
    assert len(where) <= allowed, f"{name} read the host {len(where)} times: {where}"


def _outputs(name: str) -> list[torch.Tensor]:
    entry = ENTRIES[name]
    case = entry.make(dtype=torch.float64)
    pad = _pad(2, case.inputs[entry.kv[0]].shape[entry.kv_axis]) if entry.masked and entry.kv else None
    if pad is not None:
        pad[0] = False  # batch 0: every row fully masked
    out, _ = case.run(entry.paths[0], pad, False)
    leaves = [t for t in [*case.inputs.values(), *case.params] if t.requires_grad]
    g = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)
    grads = torch.autograd.grad((out * g).sum(), leaves, allow_unused=True) if out.requires_grad else ()
    return [out, *(x for x in grads if x is not None)]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_the_cpus_look_ahead_changes_no_result(name, monkeypatch):
    """Outputs and gradients (padding, a fully masked batch) with the CPU's look-ahead and without."""
    ahead = _outputs(name)
    _as_on_a_gpu(monkeypatch)
    guarded = _outputs(name)
    assert len(ahead) == len(guarded)
    for a, b in zip(ahead, guarded):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0)
