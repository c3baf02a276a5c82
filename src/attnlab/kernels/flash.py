"""PyTorch's fused CPU flash kernel, and why its partial results over disjoint key sets combine.

The kernel (``aten._scaled_dot_product_flash_attention_for_cpu``) computes, per
query row, the output o = softmax(q kᵀ · scale + mask) v and the row's
log-sum-exp ℓ = log Σ_j exp(q·k_j · scale + mask_j), in one pass without a
score tensor; its backward recomputes the weights from ℓ (FlashAttention).

Two parts of one softmax, over disjoint key sets S₁ and S₂ of the same query,
combine exactly (the split-KV trick of Flash-Decoding, ``attnlab.kernels.partial.merge``):

    ℓ = log(e^{ℓ₁} + e^{ℓ₂}),    o = e^{ℓ₁ − ℓ} o₁ + e^{ℓ₂ − ℓ} o₂

and the backward of each part, given the *combined* o and ℓ, yields exactly that
part's share of the gradients: the kernel forms P_ij = exp(s_ij − ℓ_i) and
Δ_i = rowsum(dO_i ∘ O_i), which are then the combined softmax's. So a pattern
that is a sliding window plus other keys runs the window as contiguous spans
(``band``) and only the rest through gathered tiles (``block_sparse``).

These are private ops with CPU (and Meta) kernels only: the kernels that call
them run for CPU tensors alone (``attnlab.kernels.devices.backend_for`` chooses by
the tensors' device; CUDA goes through flex attention). Where a torch build lacks
them ``HAS_FUSED`` is False and the CPU kernels take their explicit paths (same
numbers, slower).

Reference: Dao et al., "FlashAttention", 2022, https://arxiv.org/abs/2205.14135;
Dao et al., "Flash-Decoding", 2023, https://crfm.stanford.edu/2023/10/12/flashdecoding.html.
"""

from __future__ import annotations

from typing import Any

import torch

# (None where the torch build lacks them: the callers run only when HAS_FUSED)
FLASH: Any = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
FLASH_BWD: Any = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)
HAS_FUSED = FLASH is not None and FLASH_BWD is not None


def additive(allow: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool, True = may attend → the kernel's additive mask (0 or −inf)."""
    return torch.zeros(allow.shape, dtype=dtype, device=allow.device).masked_fill_(~allow, float("-inf"))


__all__: list[str] = []
