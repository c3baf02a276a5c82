"""The conformance entries on a CUDA device: each against itself on the CPU, with padding and
NaN in the padded keys, forward and backward (marked ``cuda``; skipped with a message here).

CI has no GPU, so these run only where one is lent (see benchmarks/RESULTS.md for the runs).
"""

from __future__ import annotations

import pytest
import torch
from conformance.entries import ENTRIES

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA conformance run skips")]


def _pad(b: int, k: int, device) -> torch.Tensor:
    pad = torch.ones(b, k, dtype=torch.bool, device=device)
    pad[1, k - 2:] = False
    return pad


def _run(entry, device, poison: bool):
    case = entry.make(dtype=torch.float32, device=device)
    pad = None
    if entry.masked and entry.kv:
        k = case.inputs[entry.kv[0]].shape[entry.kv_axis]
        pad = _pad(2, k, device)
        if poison:
            with torch.no_grad():
                for name in entry.kv:
                    case.inputs[name][1].index_fill_(entry.kv_axis - 1, torch.arange(k - 2, k, device=device), float("nan"))
    out, _ = case.run(entry.paths[0], pad, False)
    leaves = [t for t in [*case.inputs.values(), *case.params] if t.requires_grad]
    g = torch.linspace(-1, 1, out.numel(), device=device).view(out.shape)
    grads = torch.autograd.grad((out * g).sum(), leaves, allow_unused=True) if out.requires_grad else ()
    return out, [None if x is None else torch.nan_to_num(x, nan=123.0) for x in grads]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_cuda_agrees_with_cpu_and_keeps_padding_out(name):
    entry = ENTRIES[name]
    cpu_out, cpu_grads = _run(entry, "cpu", poison=False)
    for poison in (False, True) if entry.masked and entry.kv else (False,):
        out, grads = _run(entry, "cuda", poison)
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), cpu_out, atol=2e-3, rtol=2e-3, msg=lambda m: f"{name} output: {m}")
        for i, (a, b) in enumerate(zip(grads, cpu_grads)):
            if a is not None and b is not None:
                torch.testing.assert_close(a.cpu(), b, atol=5e-3, rtol=5e-3, msg=lambda m, i=i: f"{name} gradient {i}: {m}")
