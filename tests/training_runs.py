"""Tests' helper: what a training run wrote, and two runs' weights compared.

``weights(run)`` reads the model's weights of a checkpoint folder (``model.*``, not the optimizer's
or the generators'); ``same_lm_weights(a, b, dim)`` asserts two GPT checkpoints' weights equal.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file


def weights(run: Path) -> dict[str, torch.Tensor]:
    """The model's weights of a training checkpoint (``model.*``; not the optimizer's or the generators')."""
    return {k: v for k, v in load_file(str(run / "model.safetensors")).items() if k.startswith("model.")}


def same_lm_weights(a: dict, b: dict, dim: int) -> None:
    """The LM's weights equal to 1e-5, but for the attention's key bias: softmax ignores a bias
    added to every key, so its true gradient is 0 and Adam's update of it is the sign of
    rounding noise, which differs with the reduction order (compared to 1e-3 instead)."""
    assert a.keys() == b.keys()
    for k in b:
        x, y = a[k], b[k]
        if k.endswith("self_attn.in_proj_bias"):
            torch.testing.assert_close(x[dim:2 * dim], y[dim:2 * dim], atol=1e-3, rtol=0, msg=k)
            x, y = torch.cat([x[:dim], x[2 * dim:]]), torch.cat([y[:dim], y[2 * dim:]])
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=k)
